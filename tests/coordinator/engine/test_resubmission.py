"""coordinator/engine/resubmission.py: an update re-sent after its round closed is a duplicate if that exact update
was counted, and FAILED_PRECONDITION (it did not count) otherwise; neither adds a submission or a spool file.
A co-located device's file answered `duplicate` is removed (the coordinator owns what is handed over)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import grpc
import numpy as np
import pytest

from coordinator_fixtures import mlp_artifacts, start_coordinator, stub_client, update_header  # noqa: F401
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.update_codecs import get_codec


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


async def _hand_over_top_k(client, local: Path, name: str, model: str, task, g: np.ndarray) -> pb.SubmitReply:
    """client-a's top-k update of `task` (always the same bytes) written to `local`/`name` and named in a header."""
    payload = get_codec("topk:0.01").encode(np.full_like(g, 0.5) + np.arange(len(g), dtype=np.float32) / len(g),
                                            np.random.default_rng(0))
    (local / name).write_bytes(payload)
    header = update_header("client-a", model, task.round, g, 10, codec="topk:0.01",
                           sha256=hashlib.sha256(payload).digest(), payload_bytes=len(payload),
                           base_sha256=task.vector_sha256)
    header.local_file = name
    return await client.submit_parts([pb.UpdatePart(header=header)])


@pytest.mark.slow
async def test_a_top_k_file_re_sent_after_its_round_counted_it_is_a_duplicate_and_the_file_is_removed(
        start_coordinator, stub_client, tmp_path):
    """The coordinator owns a handed-over file: one it answers `duplicate` without taking is deleted."""
    coord = await start_coordinator(rounds=3, min_clients=1, round_timeout_s=240, local_vector_dir=tmp_path / "lv")
    client = stub_client(coord.port)
    join = await client.join("client-a")
    model, local = join.model_id, Path(join.local_vector_dir)
    task = await client.poll("client-a", model)
    _, g = await client.download_vector("client-a", model, task.round)
    first = await _hand_over_top_k(client, local, "client-a.first.f32", model, task, g)
    assert first.accepted and not first.duplicate
    assert (await client.poll("client-a", model)).round == 2                 # round 1 closed with it counted
    before = rows(coord.state_dir)
    again = await _hand_over_top_k(client, local, "client-a.again.f32", model, task, g)
    assert again.accepted and again.duplicate and again.round == 1
    assert not (local / "client-a.again.f32").exists()
    assert rows(coord.state_dir) == before


@pytest.mark.slow
async def test_a_top_k_file_re_sent_while_its_round_is_open_is_a_duplicate_and_the_file_is_removed(
        start_coordinator, stub_client, tmp_path):
    coord = await start_coordinator(rounds=1, min_clients=2, round_timeout_s=240, local_vector_dir=tmp_path / "lv")
    client = stub_client(coord.port)
    join = await client.join("client-a")
    await client.join("client-b")                                              # the round stays open for b
    model, local = join.model_id, Path(join.local_vector_dir)
    task = await client.poll("client-a", model)
    _, g = await client.download_vector("client-a", model, task.round)
    assert not (await _hand_over_top_k(client, local, "client-a.first.f32", model, task, g)).duplicate
    again = await _hand_over_top_k(client, local, "client-a.again.f32", model, task, g)
    assert again.accepted and again.duplicate and coord.engine.training.round == task.round
    assert not (local / "client-a.again.f32").exists()
