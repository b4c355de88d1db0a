"""SubmitUpdate validation at the servicer's error boundary: each bad input gets its status code,
and a rejected update changes nothing (global vector files, spool, database)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import grpc
import numpy as np
import pytest

from coordinator_fixtures import (  # noqa: F401
    P_MLP, chunks_of, digest, mlp_artifacts, start_coordinator, stub_client, update_header,
)
from fedort.protos.stubs import fedort_v1_pb2 as pb

INVALID, PRECONDITION, NOT_FOUND, EXHAUSTED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
                                               grpc.StatusCode.NOT_FOUND, grpc.StatusCode.RESOURCE_EXHAUSTED)


def snapshot(state_dir: Path) -> tuple[str, dict[str, bytes]]:
    """Every database row and every file under vectors/ and spool/, byte for byte."""
    with sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True) as db:
        rows = "\n".join(db.iterdump())
    files = {str(p.relative_to(state_dir)): p.read_bytes()
             for sub in ("vectors", "spool") for p in sorted((state_dir / sub).rglob("*")) if p.is_file()}
    return rows, files


@pytest.fixture
async def open_round(start_coordinator, stub_client):
    """Round 1 open with client-a and client-b selected; client-c joined later (not selected)."""
    # a long deadline: a stalled machine must not retry the round (a DB write) between two snapshots
    coord = await start_coordinator(max_examples=1000, max_chunk_bytes=16384, round_timeout_s=240)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    task = await client.poll("client-a", model)
    assert task.kind == pb.Task.FIT
    await client.join("client-c")
    _, vector = await client.download_vector("client-a", model, 1)
    return coord, client, model, vector


def _parts(header: pb.UpdateHeader, chunks) -> list[pb.UpdatePart]:
    return [pb.UpdatePart(header=header)] + [pb.UpdatePart(chunk=c) for c in chunks]


def _bad_inputs(model: str, v: np.ndarray) -> dict[str, tuple[grpc.StatusCode, list[pb.UpdatePart]]]:
    ok = chunks_of(v, 16384)
    h = lambda **kw: update_header(kw.pop("client", "client-a"), kw.pop("model", model), kw.pop("round", 1),  # noqa: E731
                                   kw.pop("vec", v), kw.pop("n", 10), **kw)
    nan = v.copy()
    nan[7] = np.nan
    return {
        "no header first": (INVALID, [pb.UpdatePart(chunk=ok[0])]),
        "empty stream": (INVALID, []),
        "unknown client": (NOT_FOUND, _parts(h(client="client-zz"), ok)),
        "wrong model id": (PRECONDITION, _parts(h(model="0" * 64), ok)),
        "round not open": (PRECONDITION, _parts(h(round=2), ok)),
        "client not selected": (PRECONDITION, _parts(h(client="client-c"), ok)),
        "dtype float64": (INVALID, _parts(h(dtype="float64"), ok)),
        "unknown codec": (INVALID, _parts(h(codec="zstd"), ok)),
        "wrong length": (INVALID, _parts(h(length=P_MLP - 1), ok)),
        "zero examples": (INVALID, _parts(h(n=0), ok)),
        "too many examples": (INVALID, _parts(h(n=1001), ok)),
        "chunk over the limit": (EXHAUSTED, _parts(h(), chunks_of(v, 16384 + 4))),
        "stream too short": (INVALID, _parts(h(), ok[:-1])),
        "stream too long": (INVALID, _parts(h(), ok + [b"\0\0\0\0"])),
        "sha256 mismatch": (INVALID, _parts(h(sha256=digest(v + 1)), ok)),
        "short sha256": (INVALID, _parts(h(sha256=b"\1" * 8), ok)),
        "non-finite values": (INVALID, _parts(h(vec=nan), chunks_of(nan, 16384))),
        "empty chunk": (INVALID, _parts(h(), [b""] + ok)),
        "second header": (INVALID, _parts(h(), ok[:1]) + [pb.UpdatePart(header=h())] + _parts(h(), ok[1:])[1:]),
    }


CASES = list(_bad_inputs("m", np.zeros(P_MLP, np.float32)))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
async def test_bad_update_gets_its_status_and_changes_nothing(open_round, case):
    coord, client, model, vector = open_round
    code, parts = _bad_inputs(model, vector)[case]
    before = snapshot(coord.state_dir)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.submit_parts(parts)
    assert err.value.code() == code, err.value.details()
    assert err.value.details()
    assert snapshot(coord.state_dir) == before
    # and the client's real update is still welcome afterwards
    reply = await client.submit("client-a", model, 1, vector, 10, chunks=chunks_of(vector, 16384))
    assert reply.accepted and not reply.duplicate


async def test_stale_round_message_names_the_open_round(open_round):
    coord, client, model, vector = open_round
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.submit("client-a", model, 3, vector, 10, chunks=chunks_of(vector, 16384))
    assert err.value.details() == "round 3 is not open for updates; the open round is 1"


async def test_vector_over_the_length_limit_is_resource_exhausted(start_coordinator, stub_client):
    coord = await start_coordinator(max_vector_length=P_MLP - 1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    assert (await client.poll("client-a", model)).kind == pb.Task.FIT
    before = snapshot(coord.state_dir)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.submit("client-a", model, 1, np.zeros(P_MLP, np.float32), 5)
    assert err.value.code() == EXHAUSTED
    assert snapshot(coord.state_dir) == before


async def test_duplicate_update_is_acknowledged_and_counted_once(open_round):
    coord, client, model, vector = open_round
    a = vector + np.float32(1)
    first = await client.submit("client-a", model, 1, a, 10, chunks=chunks_of(a, 16384))
    second = await client.submit("client-a", model, 1, a + 5, 10, chunks=chunks_of(a + 5, 16384))
    assert first.accepted and not first.duplicate
    assert second.accepted and second.duplicate
    b = vector + np.float32(3)
    await client.submit("client-b", model, 1, b, 10, chunks=chunks_of(b, 16384))
    deadline = asyncio.get_running_loop().time() + 5   # until the engine serves round 2's global vector (its file
    while coord.engine.global_vector.round < 2:         # is written before the commit makes it the global)
        left = deadline - asyncio.get_running_loop().time()
        assert left > 0, "round 1 did not commit within 5 s"
        await coord.engine.wait_change(min(left, 0.5))
    _, result = await client.download_vector("client-a", model, 2)
    np.testing.assert_allclose(result, vector + 2, atol=1e-6)
    with sqlite3.connect(coord.state_dir / "state.db") as db:
        assert db.execute("SELECT COUNT(*) FROM submissions WHERE round = 1").fetchone()[0] == 2
        assert db.execute("SELECT clients, examples FROM rounds WHERE round = 1").fetchone() == (2, 20)


async def test_other_rpcs_reject_unknown_clients_and_wrong_models(open_round):
    coord, client, model, _ = open_round
    for call in (client.poll("nobody", model, 0), client.download_vector("nobody", model, 1),
                 client.stub.Heartbeat(pb.HeartbeatRequest(client_id="nobody"), timeout=5)):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == NOT_FOUND
    for call in (client.poll("client-a", "f" * 64, 0), client.download_vector("client-a", "f" * 64, 1)):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == PRECONDITION
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in client.stub.DownloadArtifact(
                pb.ArtifactRequest(client_id="client-a", model_id=model, name="secrets.txt"), timeout=5):
            pass
    assert err.value.code() == NOT_FOUND


async def test_heartbeat_reports_round_and_state(open_round):
    coord, client, model, _ = open_round
    reply = await client.stub.Heartbeat(pb.HeartbeatRequest(client_id="client-b"), timeout=5)
    assert (reply.round, reply.state) == (1, "TRAINING")


async def test_evaluation_outside_the_evaluation_phase_is_failed_precondition(open_round):
    coord, client, model, _ = open_round
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.SubmitEvaluation(pb.EvaluationResult(client_id="client-a", model_id=model, round=1,
                                                               num_examples=5), timeout=5)
    assert err.value.code() == PRECONDITION
