"""Issue 13 (6): an update is bound to the global vector it was trained from, so it cannot be replayed into a later round."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from fedort.protos.stubs import fedort_v1_pb2 as pb

from coordinator_fixtures import chunks_of, mlp_artifacts, start_coordinator, stub_client, update_header  # noqa: F401


async def _round(client, model: str, deltas: dict[str, float]) -> dict[str, list[pb.UpdatePart]]:
    """Every client trains one round; returns the exact parts each sent."""
    sent = {}
    for cid, delta in deltas.items():
        task = await client.poll(cid, model)
        assert task.kind == pb.Task.FIT
        _, g = await client.download_vector(cid, model, task.round)
        update = (g + np.float32(delta)).astype(np.float32)
        parts = [pb.UpdatePart(header=update_header(cid, model, task.round, update, 10,
                                                    trained_from=task.vector_sha256))]
        parts += [pb.UpdatePart(chunk=c) for c in chunks_of(update)]
        assert (await client.submit_parts(parts)).accepted
        sent[cid] = parts
    return sent


@pytest.mark.slow
async def test_round_one_bytes_with_only_the_round_changed_are_refused_and_the_genuine_update_counts(
        start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=2, rounds=2)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    sent = await _round(client, model, {"client-a": 0.5, "client-b": 0.25})

    task = await client.poll("client-a", model)
    assert task.kind == pb.Task.FIT and task.round == 2
    replay = [pb.UpdatePart() for _ in sent["client-a"]]
    for new, old in zip(replay, sent["client-a"]):
        new.CopyFrom(old)
    replay[0].header.vector.round = 2                     # only the round field changed
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit_parts(replay)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "stale work" in e.value.details() and "round 2 trains from" in e.value.details()
    assert coord.engine.store.submissions(2) == []

    await _round(client, model, {"client-a": 1.0})       # the device's genuine round-2 update is accepted
    assert [s.client_id for s in coord.engine.store.submissions(2)] == ["client-a"]


@pytest.mark.slow
async def test_an_update_naming_no_global_vector_is_refused_telling_to_upgrade(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=1, rounds=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    task = await client.poll("client-a", model)
    _, g = await client.download_vector("client-a", model, task.round)
    parts = [pb.UpdatePart(header=update_header("client-a", model, 1, g, 10, trained_from=b""))]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit_parts(parts + [pb.UpdatePart(chunk=c) for c in chunks_of(g)])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "trained_from_sha256" in e.value.details() and "upgrade the device" in e.value.details()
