"""edge_client.client: EdgeClient against a real in-process Coordinator on 127.0.0.1:0.

The coordinator is asyncio; it runs on its own event loop in a background thread, and the
(synchronous) clients run in the test thread or in plain threads, as on a device.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from edge_support import (  # noqa: F401 (fixtures)
    FAST, config, db, digits, part, run_in_threads, server, start_in_threads,
)
from fedort.protos.messages import TaskKind
from fedort.edge_client import EdgeClient, EdgeConfig
from fedort.edge_client.client.cache import ArtifactCache
from fedort.common.client_data import ClientData
from fedort.edge_client.client.heartbeat import Heartbeat
from fedort.ort.session import TrainingSession
from fedort.edge_client.transport.grpc_transport import ChannelConfig, Transport


# ---- the loop ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_run_trains_every_round_and_returns_when_done(server, tmp_path, digits):
    address = server.start_with(rounds=2)
    clients = [EdgeClient(config(address, tmp_path, f"dev{i}"), data=part(digits, i, 2)) for i in range(2)]
    summaries = run_in_threads(clients)
    for s in summaries:
        assert not isinstance(s, BaseException), s
        assert s.outcome == "done" and s.rounds_trained == [1, 2]
    assert server.wait_done(5).state.name == "DONE"
    rows = db(tmp_path, "SELECT round, client_id, num_examples FROM submissions ORDER BY round, client_id")
    assert sorted((r, c) for r, c, _ in rows) == sorted((r, s.client_id) for r in (1, 2) for s in summaries)
    assert {n for _, _, n in rows} == {len(part(digits, 0, 2)["x"]), len(part(digits, 1, 2)["x"])}


@pytest.mark.slow
def test_the_update_carries_the_logged_metrics_with_their_sync_flags(server, tmp_path, digits):
    address = server.start_with(rounds=1)
    data = [ClientData.from_arrays(part(digits, i, 2, 300), val=part(digits, i + 2, 4, 60)) for i in range(2)]
    clients = [EdgeClient(config(address, tmp_path, f"dev{i}"), data=data[i]) for i in range(2)]
    run_in_threads(clients)
    (metrics,) = db(tmp_path, "SELECT metrics FROM submissions WHERE client_id = ?", clients[0].client_id)[0]
    assert '"train_loss"' in metrics and '"val_accuracy"' in metrics and '"sync_dist": true' in metrics
    (round_metrics,) = db(tmp_path, "SELECT metrics FROM rounds WHERE round = 1")[0]
    assert "val_accuracy" in round_metrics


@pytest.mark.slow
def test_evaluate_tasks_report_metrics_without_training(server, tmp_path, digits):
    address = server.start_with(rounds=1, fraction_evaluate=1.0)
    clients = [EdgeClient(config(address, tmp_path, f"dev{i}"), data=part(digits, i, 2, 200)) for i in range(2)]
    summaries = run_in_threads(clients)
    for s in summaries:
        assert [r.kind for r in s.reports] == ["fit", "evaluate"]
        ev = s.reports[1]
        assert ev.outcome == "accepted" and ev.num_examples == 200 and 0.0 <= ev.metrics["val_accuracy"] <= 1.0
    assert len(db(tmp_path, "SELECT * FROM evaluations")) == 2


# ---- identity -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_client_id_is_saved_and_reused_by_a_restarted_client(server, tmp_path, digits):
    address = server.start_with()
    cache = tmp_path / "shared-cache"
    first = EdgeClient(config(address, tmp_path, "phone", cache_dir=cache), data=part(digits, 0, 4))
    cid = first.join().client_id
    first.close()
    again = EdgeClient(config(address, tmp_path, "phone", cache_dir=cache), data=part(digits, 0, 4))
    assert again.join().client_id == cid
    other = EdgeClient(config(address, tmp_path, "tablet", cache_dir=cache), data=part(digits, 1, 4))
    assert other.join().client_id != cid
    for c in (again, other):
        c.close()
    assert len(db(tmp_path, "SELECT client_id FROM clients")) == 2


def test_an_explicit_client_id_is_registered_as_given(server, tmp_path, digits):
    address = server.start_with()
    client = EdgeClient(config(address, tmp_path, "sim", client_id="client-0007"), data=part(digits, 0, 4))
    assert client.join().client_id == "client-0007"
    client.close()
    assert db(tmp_path, "SELECT client_id FROM clients") == [("client-0007",)]


@pytest.mark.slow
def test_artifacts_are_downloaded_once_per_cache(server, tmp_path, digits):
    address = server.start_with()
    cache = tmp_path / "cache"
    a = EdgeClient(config(address, tmp_path, "a", cache_dir=cache), data=part(digits, 0, 4))
    a.join()
    blobs = {p: (p.stat().st_ino, 10**9) for p in (cache / "blobs" / "sha256").iterdir()}
    assert len(blobs) == 4
    for p in blobs:   # an old mtime, so any rewrite shows (no waiting for the clock to tick)
        os.utime(p, ns=(10**9, 10**9))
    b = EdgeClient(config(address, tmp_path, "b", cache_dir=cache), data=part(digits, 1, 4))
    b.join()
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (cache / "blobs" / "sha256").iterdir()} == blobs
    for c in (a, b):
        c.close()


# ---- many virtual clients in one process --------------------------------------------------------

@pytest.mark.slow
def test_virtual_clients_share_one_channel_one_session_and_one_vector_download(server, tmp_path, mlp_artifacts, digits):
    address = server.start_with(rounds=2, min_clients=2, min_available_clients=6, fraction=0.5)
    transport = Transport(ChannelConfig(address, insecure=True))
    session = TrainingSession.from_artifacts(mlp_artifacts)
    cache = ArtifactCache(tmp_path / "cache")
    clients = [
        EdgeClient(EdgeConfig(address, insecure=True, client_id=f"client-{i:04d}", heartbeats=False, persist_identity=False,
                              backoff=FAST),
                   transport=transport, session=session, cache=cache, data=part(digits, i, 6, 100))
        for i in range(6)
    ]
    try:
        for c in clients:
            c.join()
        done: set[str] = set()
        deadline = time.monotonic() + 40
        while len(done) < len(clients) and time.monotonic() < deadline:
            for c in clients:
                if c.client_id in done:
                    continue
                task = c.poll(wait_ms=0)
                if task.kind == TaskKind.DONE:
                    done.add(c.client_id)
                elif task.kind == TaskKind.FIT:
                    c.handle(task)          # WAIT: the driver moves on instead of sleeping
            time.sleep(0.02)
        assert len(done) == 6
        reports = [r for c in clients for r in c.reports]
        for rnd in (1, 2):
            mine = [r for r in reports if r.round == rnd]
            assert len(mine) == 3 and all(r.outcome == "accepted" for r in mine)
            assert sum(not r.vector_cached for r in mine) == 1  # downloaded once, then shared
        assert len(db(tmp_path, "SELECT * FROM submissions")) == 6
    finally:
        transport.close()


# ---- idempotent and stale submissions -----------------------------------------------------------

@pytest.mark.slow
def test_a_second_submission_for_the_same_round_counts_once(server, tmp_path, digits):
    address = server.start_with(rounds=1)
    a, b = (EdgeClient(config(address, tmp_path, n), data=part(digits, i, 2, 100)) for i, n in enumerate("ab"))
    a.join()
    b.join()
    task = a.poll()
    assert task.kind == TaskKind.FIT and task.round == 1
    assert a.handle(task).outcome == "accepted"
    assert a.handle(task).outcome == "duplicate"
    assert len(db(tmp_path, "SELECT * FROM submissions WHERE client_id = ?", a.client_id)) == 1
    for c in (a, b):
        c.close()


def _round_one_closed(server, tmp_path, digits, hook) -> tuple[EdgeClient, EdgeClient, object]:
    """Devices a (with `hook`) and b both report round 1, so it closes; a's round-1 task, to send again."""
    address = server.start_with(rounds=2)
    a = EdgeClient(config(address, tmp_path, "a", update_hook=hook), data=part(digits, 0, 2, 100))
    b = EdgeClient(config(address, tmp_path, "b"), data=part(digits, 1, 2, 100))
    a.join()
    b.join()
    first = a.poll()
    a.handle(first)
    b.handle(b.poll())                     # round 1 closes; round 2 opens
    assert a.poll().round == 2
    return a, b, first


@pytest.mark.slow
def test_an_update_for_a_round_that_closed_is_dropped_as_stale(server, tmp_path, digits):
    shifts = iter([0.0, 0.001])            # a's second round-1 update differs from the one that counted
    a, b, first = _round_one_closed(server, tmp_path, digits, lambda task, g, v: v + np.float32(next(shifts)))
    late = a.handle(first)                 # e.g. a device that trained round 1 too slowly
    assert late.outcome == "stale" and "not open" in late.message
    assert len(db(tmp_path, "SELECT * FROM submissions WHERE round = 2")) == 0
    for c in (a, b):
        c.close()


@pytest.mark.slow
def test_the_counted_update_sent_again_after_its_round_closed_is_acknowledged_as_a_duplicate(server, tmp_path,
                                                                                              digits):
    same = lambda task, g, v: g + np.float32(0.001)   # noqa: E731 - the same bytes each time it trains round 1
    a, b, first = _round_one_closed(server, tmp_path, digits, same)
    again = a.handle(first)                # the update it sent, again: e.g. its answer was lost
    assert again.outcome == "duplicate" and "closed" in again.message
    assert len(db(tmp_path, "SELECT * FROM submissions WHERE client_id = ?", a.client_id)) == 1
    for c in (a, b):
        c.close()


# ---- liveness, stopping, restarts -----------------------------------------------------------------

@pytest.mark.slow
def test_heartbeats_are_sent_while_busy(server, tmp_path, digits):
    address = server.start_with()
    client = EdgeClient(config(address, tmp_path, "dev"), data=part(digits, 0, 4))
    client.join()
    with Heartbeat(client.transport, client.client_id, 0.1) as hb:
        deadline = time.monotonic() + 30    # until three were answered (a fixed 1 s could see fewer on a loaded machine)
        while hb.sent + hb.failed < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert hb.sent >= 3 and hb.failed == 0
    client.close()


def lone_polling_client(server, tmp_path, digits) -> tuple[EdgeClient, threading.Thread, list]:
    """A joined client that will long-poll for 30 s at a time and never get a task (min_clients=2), the thread
    that will run it, and the list its RunSummary lands in."""
    address = server.start_with(min_clients=2)
    client = EdgeClient(EdgeConfig(address, insecure=True, name="dev", cache_dir=tmp_path / "c", poll_wait_ms=30_000,
                                   backoff=FAST), data=part(digits, 0, 4))
    client.join()
    result: list = []
    return client, threading.Thread(target=lambda: result.append(client.run()), daemon=True), result


@pytest.mark.slow
def test_stop_cuts_a_long_poll_short_and_leaves(server, tmp_path, digits):
    client, thread, result = lone_polling_client(server, tmp_path, digits)
    thread.start()
    # the stop comes while the client is held in the server's 30 s long-poll (it polls again and again,
    # min_clients=2 never being reached), so a stop at any moment must end it
    threading.Timer(0.5, client.stop, args=("test stop",)).start()
    thread.join(20)                       # well inside the 30 s hold: the stop cut it short
    assert not thread.is_alive() and result[0].outcome == "stopped"
    assert db(tmp_path, "SELECT active, left_reason FROM clients") == [(0, "test stop")]


def test_a_stop_that_lands_as_a_long_poll_starts_still_cuts_it_short(server, tmp_path, digits):
    from fedort.common.faults import armed

    client, thread, result = lone_polling_client(server, tmp_path, digits)
    stopped_at: list = []

    def stop_as_the_poll_starts() -> None:
        # past run()'s and the retry loop's stop checks, before the call exists to be cancelled
        if client.phase == "polling" and not stopped_at:
            stopped_at.append(client.phase)
            client.stop("test stop")

    with armed("transport.before_call", stop_as_the_poll_starts):
        thread.start()
        thread.join(20)                   # well inside the 30 s hold the missed stop would wait out
    assert stopped_at == ["polling"]
    assert not thread.is_alive() and result[0].outcome == "stopped"
    assert db(tmp_path, "SELECT active, left_reason FROM clients") == [(0, "test stop")]


@pytest.mark.slow
def test_clients_resume_after_the_coordinator_restarts(tmp_path, mlp_artifacts, digits):
    # a real crash: the coordinator process is SIGKILLed after round 1 and started again on the same port
    from chaos_support import CoordinatorProcess

    flags = dict(rounds=3, min_clients=2, round_timeout=20, local_epochs=1, batch_size=32, lr=0.05)
    first = CoordinatorProcess(mlp_artifacts, tmp_path / "state", tmp_path / "coordinator.log", **flags)
    address = f"127.0.0.1:{first.port}"
    clients = [EdgeClient(config(address, tmp_path, f"dev{i}"), data=part(digits, i, 2, 300)) for i in range(2)]
    threads, results = start_in_threads(clients)
    again = None
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not db(tmp_path, "SELECT * FROM rounds WHERE round = 1 AND closed_ms"):
            time.sleep(0.02)
        first.kill()
        again = CoordinatorProcess(mlp_artifacts, tmp_path / "state", tmp_path / "coordinator.log", address=address,
                                   **flags)
        for t in threads:
            t.join(60)
        assert all(getattr(s, "outcome", None) == "done" for s in results), results
        assert again.proc.wait(30) == 0
    finally:
        for c in clients:
            c.stop()
        for p in (first, again):
            if p is not None:
                p.kill()
    ids = {c.client_id for c in clients}
    assert {c for (c,) in db(tmp_path, "SELECT client_id FROM clients")} == ids  # same identities
    rows = db(tmp_path, "SELECT round, client_id FROM submissions")
    assert sorted(rows) == sorted((r, c) for r in (1, 2, 3) for c in ids)   # each counted exactly once


# ---- research/testing hook ------------------------------------------------------------------------

@pytest.mark.slow
def test_an_update_hook_replaces_the_uploaded_vector_given_the_rounds_global_vector(server, tmp_path, digits):
    address = server.start_with(rounds=1, min_clients=1)
    seen = []

    def hook(task, global_vector, local_vector):
        seen.append((task.round, global_vector.copy(), local_vector.copy()))
        return global_vector + np.float32(1.0)

    client = EdgeClient(config(address, tmp_path, "dev0", update_hook=hook), data=part(digits, 0, 2, 100))
    assert client.run().rounds_trained == [1]
    vectors = tmp_path / "state" / "vectors"
    start = np.fromfile(vectors / "round-0001.f32", dtype="<f4")
    (round_, given, trained), = seen
    assert round_ == 1 and np.array_equal(given, start) and not np.array_equal(trained, start)
    np.testing.assert_allclose(np.fromfile(vectors / "round-0002.f32", dtype="<f4"), start + 1.0, atol=1e-6)
