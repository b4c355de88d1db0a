"""coordinator.metric_limits: metric names and counts are bounded where they arrive, a round's summary
keeps the metrics reported over the most examples, and Status answers everyone however many distinct
names devices send."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest

from coordinator_fixtures import RPC_TIMEOUT, mlp_artifacts, start_coordinator, stub_client  # noqa: F401 (fixtures)
from fedort.coordinator.uploads.metric_limits import MAX_METRIC_NAME_BYTES, MAX_METRICS, MAX_ROUND_METRICS
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.common.round_state import RoundState


async def _round_open(start_coordinator, stub_client, clients: tuple[str, ...]):
    coord = await start_coordinator(rounds=1, min_clients=len(clients), min_available_clients=len(clients))
    client = stub_client(coord.port)
    model = (await client.join(clients[0])).model_id
    for cid in clients[1:]:
        await client.join(cid)
    tasks = [await client.poll(cid, model) for cid in clients]
    assert all(t.kind == pb.Task.FIT for t in tasks)
    _, g = await client.download_vector(clients[0], model, 1)
    return coord, client, model, g


@pytest.mark.parametrize("metrics, message", [
    ({f"m{i}": (1.0, True) for i in range(MAX_METRICS + 1)}, f"at most {MAX_METRICS} metrics, got {MAX_METRICS + 1}"),
    ({"x" * 70_000: (1.0, True)}, f"metric names must be 1..{MAX_METRIC_NAME_BYTES} bytes, got one of 70000"),
    ({"": (1.0, True)}, f"metric names must be 1..{MAX_METRIC_NAME_BYTES} bytes, got one of 0"),
])
async def test_too_many_or_too_long_metric_names_are_invalid_argument(start_coordinator, stub_client, metrics, message):
    coord, client, model, g = await _round_open(start_coordinator, stub_client, ("client-a",))
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit("client-a", model, 1, g, 10, metrics)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in e.value.details()
    assert coord.engine.store.submissions(1) == []


async def test_distinct_names_from_many_devices_leave_a_bounded_summary_and_status_answers(start_coordinator,
                                                                                        stub_client):
    clients = ("client-a", "client-b", "client-c")
    coord, client, model, g = await _round_open(start_coordinator, stub_client, clients)
    for i, cid in enumerate(clients):      # 31 names of its own each, and "loss", which all report
        metrics = {f"{cid}-{k:02d}-" + "n" * 40: (1.0, True) for k in range(MAX_METRICS - 1)}
        await client.submit(cid, model, 1, g, 10, {**metrics, "loss": (float(i), True)})
    assert (await asyncio.wait_for(coord.wait_done(), 20)).state is RoundState.DONE
    status = await client.stub.Status(pb.StatusRequest(), timeout=RPC_TIMEOUT)
    summary = {r.round: r for r in status.rounds}[1]
    assert len(summary.metrics) == MAX_ROUND_METRICS
    assert summary.metrics["loss"] == pytest.approx(1.0)        # the metric every device reported is kept
