"""A device cannot inflate its FedAvg weight past the examples it announced at Join (or the run's
max_examples), and an aggregate that overflows is refused and its round retried, not committed and
not a FAILED run."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest

from coordinator_fixtures import RPC_TIMEOUT, mlp_artifacts, start_coordinator, stub_client  # noqa: F401 (fixtures)
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.common.round_state import RoundState


async def _join(client, cid: str, examples: int | None = None) -> str:
    caps = {} if examples is None else {"examples": str(examples)}
    reply = await client.stub.Join(pb.JoinRequest(client_id=cid, device_name=cid, capabilities=caps),
                                   timeout=RPC_TIMEOUT)
    return reply.model_id


async def _fit(client, cid: str, model: str) -> np.ndarray:
    task = await client.poll(cid, model)
    assert task.kind == pb.Task.FIT
    return (await client.download_vector(cid, model, task.round))[1]


async def test_num_examples_over_what_the_device_announced_at_join_is_refused(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=1, min_clients=3, min_available_clients=3)
    client = stub_client(coord.port)
    model = await _join(client, "liar", examples=50)
    for cid in ("honest-a", "honest-b"):
        await _join(client, cid, examples=50)
    g = await _fit(client, "liar", model)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit("liar", model, 1, (g + np.float32(9.0)).astype(np.float32), 10**9)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "num_examples must be in 1..50 (the examples the device announced at Join), got 1000000000" \
        in e.value.details()
    await client.submit("liar", model, 1, (g + np.float32(9.0)).astype(np.float32), 50)   # its true weight
    for cid in ("honest-a", "honest-b"):
        await _fit(client, cid, model)
        await client.submit(cid, model, 1, g, 50)
    assert (await asyncio.wait_for(coord.wait_done(), 20)).state is RoundState.DONE
    committed = np.fromfile(coord.engine.store.vector_path(2), dtype="<f4")
    np.testing.assert_allclose(committed, g + np.float32(3.0), rtol=1e-6, atol=1e-6)   # a third of its +9


async def test_without_an_announcement_max_examples_bounds_the_weight(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=1, min_clients=1, max_examples=1000)
    client = stub_client(coord.port)
    model = await _join(client, "liar")
    g = await _fit(client, "liar", model)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit("liar", model, 1, g, 10**9)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "num_examples must be in 1..1000 (max_examples), got 1000000000" in e.value.details()


async def test_an_overflowing_fedavgm_step_is_refused_and_the_round_retried_with_fresh_updates(start_coordinator,
                                                                                               stub_client):
    coord = await start_coordinator(rounds=1, min_clients=2, max_round_attempts=2, server_optimizer="fedavgm:lr=10")
    client = stub_client(coord.port)
    model = await _join(client, "huge")
    await _join(client, "honest")
    g = await _fit(client, "huge", model)
    await _fit(client, "honest", model)
    await client.submit("huge", model, 1, np.full_like(g, 3e38), 10)        # finite, but 10 × the step overflows
    await client.submit("honest", model, 1, (g + np.float32(0.5)).astype(np.float32), 10)
    loop = asyncio.get_running_loop()
    until = loop.time() + 20
    while coord.engine.training is None or coord.engine.training.attempt < 2:   # the round reopened
        assert coord.state is not RoundState.FAILED and loop.time() < until, coord.state
        await asyncio.sleep(0.02)
    assert coord.engine.store.submissions(1) == []              # the refused attempt's updates are gone
    for cid in ("huge", "honest"):                              # both selected again; this time both honest
        await _fit(client, cid, model)
        await client.submit(cid, model, 1, (g + np.float32(0.5)).astype(np.float32), 10)
    outcome = await asyncio.wait_for(coord.wait_done(), 20)
    assert outcome.state is RoundState.DONE
    committed = np.fromfile(coord.engine.store.vector_path(2), dtype="<f4")
    np.testing.assert_allclose(committed, g + np.float32(5.0), rtol=1e-5, atol=1e-5)   # g + lr × (mean − g)
