"""A round's commit shares the next round's open transaction (`StateStore.commit_round(defer=True)`).

Real SQLite, and a real process SIGKILLed between the deferred commit and the open: until the
open's transaction, the round is not committed on disk (a restart replays it from its durable
updates); after it, the commit and the next round's open are durable together.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from fedort.coordinator.state.store import StateStore


def states(state_dir) -> list[tuple[int, str]]:
    reader = StateStore(state_dir, readonly=True)   # another connection: only what is committed on disk
    try:
        return [(r.round, r.state) for r in reader.rounds()]
    finally:
        reader.close()


@pytest.fixture
def deferred(tmp_path):
    """A store whose round 1 is committed with defer=True (and nothing after it yet)."""
    store = StateStore(tmp_path / "state")
    try:
        store.open_round(1, 1, ["a"], 123)
        store.commit_round(1, "ab" * 32, 1, 10, {}, defer=True)
        yield store
    finally:
        store.close()


def test_a_deferred_commit_is_written_by_the_next_open_in_the_same_transaction(tmp_path, deferred):
    assert deferred.deferred and states(tmp_path / "state") == [(1, "TRAINING")]
    deferred.open_round(2, 1, ["a"], 456)
    assert not deferred.deferred
    assert states(tmp_path / "state") == [(1, "COMMITTED"), (2, "TRAINING")]


def test_flush_commits_a_deferred_commit_when_no_open_follows(tmp_path, deferred):
    deferred.flush()
    assert states(tmp_path / "state") == [(1, "COMMITTED")]


CHILD = textwrap.dedent("""
    import sys, time
    from fedort.coordinator.state.store import StateStore
    from fedort.coordinator.state.schema import SubmissionRow
    store = StateStore(sys.argv[1])
    store.open_round(1, 1, ["a"], 123)
    store.add_submission(SubmissionRow(1, "a", 10, {}, "00" * 32, "spool/round-0001/a.f32", 0, "raw", b"x" * 8))
    store.commit_round(1, "ab" * 32, 1, 10, {}, defer=True)
    print("deferred", flush=True)
    time.sleep(60)
""")


def test_a_sigkill_between_a_deferred_commit_and_the_next_open_leaves_the_round_uncommitted_with_its_updates(tmp_path):
    state_dir = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(state_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "deferred"   # bounded: the child exits (EOF) if it fails
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert states(state_dir) == [(1, "TRAINING")]                  # not committed: a restart replays round 1 ...
    store = StateStore(state_dir, readonly=True)
    try:
        (row,) = store.submissions(1)                          # ... from its durable update, bytes and all
        assert (row.client_id, row.payload) == ("a", b"x" * 8)
    finally:
        store.close()
