"""Recycled spool files for streamed uploads (coordinator.spool_free): overwritten in place, same bytes, same checks.

A committed round's spool files go to SPOOL/.free (bounded; files under MIN_BYTES are deleted) and
a streamed upload claims one as its temp file: whatever the file held before, the spooled update
is exactly the bytes received, a refused upload removes the claimed file and counts nothing, and
the pool is emptied when the coordinator starts and stops. (The tests lower MIN_BYTES: the
digits MLP's updates are 38 KB.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import numpy as np
import pytest

from chaos_support import open_access, state_snapshot
from coordinator_fixtures import chunks_of, mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.coordinator.uploads import spool_free
from fedort.coordinator.uploads.spool_free import FreeSpoolFiles
from fedort.protos.stubs import fedort_v1_pb2 as pb


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x07" * size)
    return path


def test_recycling_is_bounded_and_skips_small_and_temp_files(tmp_path, monkeypatch):
    monkeypatch.setattr(spool_free, "MIN_BYTES", 10)
    monkeypatch.setattr(spool_free, "KEEP", 3)
    monkeypatch.setattr(spool_free, "KEEP_BYTES", 250)
    pool = FreeSpoolFiles(tmp_path / "spool")
    done = [write(tmp_path / "spool" / "round-0001" / f"c{i}.f32", 100) for i in range(3)]
    small = write(tmp_path / "spool" / "round-0001" / "tiny.f32", 9)
    temp = write(tmp_path / "spool" / "round-0001" / ".c9.1.1.tmp", 100)
    pool.asked = 5                                                        # five streamed uploads asked for a file
    assert pool.recycle([*done, small, temp]) == [done[2], small, temp]   # 2 x 100 fit in 250 bytes
    assert len(files(pool.path)) == 2


def test_the_pool_keeps_only_as_many_files_as_streamed_uploads_asked_for(tmp_path, monkeypatch):
    monkeypatch.setattr(spool_free, "MIN_BYTES", 10)
    pool = FreeSpoolFiles(tmp_path / "spool")
    done = [write(tmp_path / "spool" / "round-0001" / f"c{i}.f32", 100) for i in range(3)]
    assert pool.recycle(done) == done                                     # nobody streamed: all deleted
    assert not pool.claim(tmp_path / "spool" / "x.tmp", 100)              # one upload asks (the pool is empty)
    assert pool.recycle(done) == done[1:] and len(files(pool.path)) == 1


def test_a_claim_takes_the_smallest_file_big_enough_else_the_largest(tmp_path, monkeypatch):
    monkeypatch.setattr(spool_free, "MIN_BYTES", 10)
    pool = FreeSpoolFiles(tmp_path / "spool")
    for name, size in (("a", 50), ("b", 200), ("c", 120)):
        write(pool.path / f"{name}.f32", size)
    target = tmp_path / "spool" / "round-0001" / ".x.tmp"
    target.parent.mkdir()
    assert pool.claim(target, 100) and target.stat().st_size == 120
    target.unlink()
    assert pool.claim(target, 300) and target.stat().st_size == 200
    target.unlink()
    assert not pool.claim(target, 5)                     # below MIN_BYTES: a new file
    assert pool.claim(target, 60) and not pool.claim(tmp_path / "other", 60) and files(pool.path) == []


@pytest.fixture
async def one_client_round(start_coordinator, stub_client, monkeypatch):
    """A 2-round run with one client, spool files always (no inline updates), recycling at any size."""
    monkeypatch.setattr(spool_free, "MIN_BYTES", 1)

    async def start(**overrides):
        coord = await start_coordinator(min_clients=1, inline_update_bytes=0, round_timeout_s=120,
                                        **open_access(), **overrides)
        client = stub_client(coord.port)
        model = (await client.join("client-a")).model_id
        assert (await client.poll("client-a", model)).kind == pb.Task.FIT
        _, vector = await client.download_vector("client-a", model, 1)
        return coord, client, model, vector
    return start


async def wait_until(check, what: str) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_an_upload_overwrites_a_longer_recycled_file_and_spools_exactly_its_bytes(one_client_round):
    coord, client, model, vector = await one_client_round()
    free = coord.state_dir / "spool" / ".free"
    stale = write(free / "old.f32", 4 * vector.size + 1000)            # longer than an update, other bytes
    update = (vector + np.float32(0.5)).astype(np.float32)
    assert (await client.submit("client-a", model, 1, update, 10)).accepted
    assert not stale.exists()                                            # claimed
    assert (coord.state_dir / "spool" / "round-0001" / "client-a.f32").read_bytes() == update.tobytes()
    assert (await client.poll("client-a", model)).round == 2
    _, global2 = await client.download_vector("client-a", model, 2)
    np.testing.assert_array_equal(global2, update)                      # one client: the mean is its update
    # round 1's spool file is recycled once its export is done, and round 2's upload overwrites it
    await wait_until(lambda: len(files(free)) == 1, "round 1's spool file in the pool")
    update2 = (global2 - np.float32(0.25)).astype(np.float32)
    assert (await client.submit("client-a", model, 2, update2, 10)).accepted
    assert files(free) == []
    assert (coord.state_dir / "spool" / "round-0002" / "client-a.f32").read_bytes() == update2.tobytes()


async def test_a_refused_upload_removes_the_claimed_file_and_counts_nothing(one_client_round):
    coord, client, model, vector = await one_client_round()
    free = coord.state_dir / "spool" / ".free"
    write(free / "old.f32", 4 * vector.size)
    db, vectors, spool = state_snapshot(coord)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.submit("client-a", model, 1, vector, 10, sha256=b"\0" * 32)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert files(free) == []                                             # claimed, then removed as a temp file
    assert state_snapshot(coord) == (db, vectors, [s for s in spool if not s.startswith("spool/.free/")])
    reply = await client.submit("client-a", model, 1, vector, 10, chunks=chunks_of(vector))
    assert reply.accepted and not reply.duplicate


async def test_the_pool_is_emptied_when_the_coordinator_starts_and_stops(start_coordinator, tmp_path):
    leftover = write(tmp_path / "state" / "spool" / ".free" / "1-0.f32", 64)
    coord = await start_coordinator(**open_access())
    assert not leftover.exists()
    write(leftover, 64)
    await coord.stop(grace=0)
    assert files(leftover.parent) == []
