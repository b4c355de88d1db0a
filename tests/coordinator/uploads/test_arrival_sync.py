"""coordinator.arrival_commit with `Arrival.sync`: a co-located device's update file, taken without its
fdatasync so the fold thread moves on, is made durable by the group commit before it is placed.

Against a real StateStore (SQLite) and real files: a synced arrival ends in place with its row, and
one whose file vanished before its commit fails the whole group (no row, nothing placed)."""

from __future__ import annotations

import asyncio

import pytest

from fedort.coordinator.uploads.arrival_commit import Arrival, ArrivalCommit
from fedort.coordinator.state.store import StateStore
from fedort.coordinator.state.schema import SubmissionRow


@pytest.fixture
def store(tmp_path):
    s = StateStore(tmp_path / "state")
    s.open_round(1, 0, ["client-a", "client-b"], 0)
    yield s
    s.close()


def arrival(store: StateStore, client: str, body: bytes | None, sync: bool) -> Arrival:
    tmp = store.layout.spool_temp(1, client, 1)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    if body is not None:
        tmp.write_bytes(body)
    path = store.spool_path(1, client)
    row = SubmissionRow(1, client, 3, {}, "00" * 32, store.layout.relative(path), 0)
    return Arrival(tmp, path, row, sync=sync)


async def commit(store: StateStore, *arrivals: Arrival) -> list[BaseException | None]:
    commits = ArrivalCommit(store)
    try:
        return await asyncio.gather(*(commits.add(a) for a in arrivals), return_exceptions=True)
    finally:
        commits.close()


async def test_an_arrival_to_sync_is_placed_with_its_row_beside_one_already_synced(store):
    a, b = arrival(store, "client-a", b"A" * 4096, sync=True), arrival(store, "client-b", b"B" * 4096, sync=False)
    assert await commit(store, a, b) == [None, None]
    assert a.path.read_bytes() == b"A" * 4096 and b.path.read_bytes() == b"B" * 4096
    assert not a.spooled.exists() and not b.spooled.exists()
    assert {s.client_id for s in store.submissions(1)} == {"client-a", "client-b"}


async def test_an_arrival_whose_file_vanished_before_its_sync_fails_the_group_and_places_nothing(store):
    gone, kept = arrival(store, "client-a", None, sync=True), arrival(store, "client-b", b"B" * 4096, sync=True)
    results = await commit(store, kept, gone)
    assert all(isinstance(r, OSError) for r in results)   # the group fails as one: neither acknowledged
    assert store.submissions(1) == []
    assert not gone.path.exists() and not kept.path.exists() and kept.spooled.exists()
