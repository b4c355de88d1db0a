"""coordinator/resubmission.py: an update re-sent after its round closed is a duplicate if that exact update
was counted, and FAILED_PRECONDITION (it did not count) otherwise; neither adds a submission or a spool file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import grpc
import numpy as np
import pytest

from coordinator_fixtures import mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.protos import fedort_v1_pb2 as pb


def rows(state_dir: Path) -> list[tuple]:
    with sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True) as db:
        return db.execute("SELECT * FROM submissions ORDER BY round, client_id").fetchall()


def spool_files(state_dir: Path) -> set[str]:
    return {str(p.relative_to(state_dir)) for p in (state_dir / "spool").rglob("*") if p.is_file()}


@pytest.fixture
async def closed_round(start_coordinator, stub_client):
    """client-a's update counted in round 1, which closed; round 2 is open."""
    coord = await start_coordinator(rounds=3, min_clients=1, round_timeout_s=240)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    _, _, reply = await client.fit_round("client-a", model, 0.5, 10)
    assert reply.accepted and not reply.duplicate
    assert (await client.poll("client-a", model)).round == 2
    _, vector = await client.download_vector("client-a", model, 1)
    return coord, client, model, vector


async def test_the_counted_update_sent_again_after_its_round_closed_is_a_duplicate(closed_round):
    coord, client, model, vector = closed_round
    before, files = rows(coord.state_dir), spool_files(coord.state_dir)
    again = await client.submit("client-a", model, 1, vector + np.float32(0.5), 10)
    assert again.accepted and again.duplicate and again.round == 1
    assert rows(coord.state_dir) == before and spool_files(coord.state_dir) <= files   # (round 1's may be cleaned)


async def test_another_update_for_the_closed_round_is_refused_as_stale(closed_round):
    coord, client, model, vector = closed_round
    before, files = rows(coord.state_dir), spool_files(coord.state_dir)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.submit("client-a", model, 1, vector + np.float32(0.25), 10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert rows(coord.state_dir) == before and spool_files(coord.state_dir) <= files


async def test_async_mode_a_counted_update_sent_again_after_the_run_ended_is_a_duplicate(start_coordinator,
                                                                                          stub_client):
    coord = await start_coordinator(rounds=1, buffer_size=1, mode="async", min_clients=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    _, _, reply = await client.fit_round("client-a", model, 0.5, 10)
    assert reply.accepted and not reply.duplicate
    assert (await client.poll("client-a", model)).kind == pb.Task.DONE   # no version takes updates any more
    _, vector = await client.download_vector("client-a", model, 1)
    again = await client.submit("client-a", model, 1, vector + np.float32(0.5), 10)
    assert again.accepted and again.duplicate
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.submit("client-a", model, 1, vector + np.float32(0.25), 10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
