"""SecAggBatch: the steps of devices sharing one transport travel together, with each step's own answer."""

from __future__ import annotations

import asyncio
import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fedort.coordinator import RoundState
from fedort.edge_client.secagg.flow import SecAggFlow
from fedort.edge_client.transport.grpc_transport import ChannelConfig, Transport
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.vector_stream import CHUNK_BYTES
from fedort.protos.messages import TaskKind
from fedort.common.secagg import AdvertiseKeys
from fedort.common.secagg.scheme import COMMITTED
from coordinator_fixtures import P_MLP, mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from secagg_devices import CURRENT, deltas_for

SCALE = 65536.0


def _devices_on_one_transport(port: int, deltas: dict[str, np.ndarray], watch=None) -> tuple[dict, int]:
    """Every device joins and polls over one shared Transport, then runs its SecAggFlow in its own thread
    (as a simulation worker does); (outcomes by id, SecAggBatch calls made). `watch(transport)` sees it first."""
    with Transport(ChannelConfig(f"127.0.0.1:{port}", insecure=True, rpc_timeout_s=60)) as transport:
        if watch is not None:
            watch(transport)
        model = ""
        for c in deltas:
            model = transport.join("batch-test", client_id=c, capabilities=CURRENT).model_id
        tasks = {c: transport.poll(c, model, 5000) for c in deltas}
        assert all(t.kind == TaskKind.FIT and t.secagg for t in tasks.values())
        g = transport.download_vector(next(iter(deltas)), model, tasks[next(iter(deltas))].round)

        def run(c: str):
            flow = SecAggFlow(transport, c, model, tasks[c], lambda what, fn: fn(), poll_wait_ms=5000)
            return flow.run(g, g + deltas[c], 10, {}, CHUNK_BYTES)

        with ThreadPoolExecutor(len(deltas)) as pool:
            outcomes = dict(zip(deltas, pool.map(run, deltas, timeout=120)))
        return outcomes, transport.secagg_steps.batch_calls


async def test_devices_sharing_a_transport_batch_their_steps_and_the_sum_is_exact(start_coordinator, stub_client):
    ids = [f"dev-{i}" for i in range(6)]
    coord = await start_coordinator(rounds=1, min_clients=6, secagg=True, round_timeout_s=30)
    deltas = deltas_for(ids, P_MLP, seed=11)
    outcomes, batches = await asyncio.to_thread(_devices_on_one_transport, coord.port, deltas)
    assert all(o == ("accepted", "accepted") for o in outcomes.values()), outcomes
    assert 1 <= batches < 4 * len(ids)                  # fewer calls than one per step (4 steps per device)
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    client = stub_client(coord.port)
    model = (await client.join(ids[0])).model_id
    _, start = await client.download_vector(ids[0], model, 1)
    _, final = await client.download_vector(ids[0], model, 2)
    mean = sum(np.rint(np.clip(deltas[c].astype(np.float64), -1, 1) * 10 * SCALE) for c in ids) / SCALE / 60
    np.testing.assert_allclose(final, start.astype(np.float64) + mean, atol=1e-6)


async def test_a_failing_entry_gets_its_own_status_at_once_and_the_others_are_not_held(start_coordinator, stub_client):
    ids = ["dev-a", "dev-b", "dev-c"]
    coord = await start_coordinator(rounds=1, min_clients=3, secagg=True, round_timeout_s=30)
    client = stub_client(coord.port)
    model = ""
    for c in ids:
        model = (await client.stub.Join(pb.JoinRequest(device_name="t", client_id=c, capabilities=CURRENT))).model_id
    tasks = {c: await client.poll(c, model) for c in ids}
    assert json.loads(tasks["dev-a"].secagg)["params"]["scheme"] == COMMITTED
    good = AdvertiseKeys("dev-a", os.urandom(32), os.urandom(32), COMMITTED)
    old = AdvertiseKeys("dev-b", os.urandom(32), os.urandom(32))            # a device before protocol 1.3
    steps = [pb.SecAggRequest(client_id=k.client_id, model_id=model, round=tasks[k.client_id].round,
                              step=pb.SecAggRequest.ADVERTISE, payload=k.to_bytes()) for k in (good, old)]
    reply = await asyncio.wait_for(client.stub.SecAggBatch(pb.SecAggBatchRequest(steps=steps, wait_ms=20_000)), 10)
    a, b = reply.entries
    assert (a.client_id, a.ready, a.error_code) == ("dev-a", False, "")        # recorded; its phase is still open
    assert (b.client_id, b.error_code) == ("dev-b", "FAILED_PRECONDITION") and "protocol >= 1.8" in b.error_message


class _BatchSpy:
    """The real transport, recording the steps each SecAggBatch call carried (observation only)."""

    def __init__(self, transport: Transport) -> None:
        self.transport, self.batches = transport, []
        real = transport.long_poll

        def long_poll(name, request, wait_ms):
            if name == "SecAggBatch":
                self.batches.append(sorted(int(s.step) for s in request(wait_ms).steps))
            return real(name, request, wait_ms)
        transport.long_poll = long_poll


async def test_the_unmask_requests_of_devices_sharing_a_transport_travel_in_one_call(start_coordinator):
    """Devices that mask one at a time (secagg_lane) ask for the unmask request a few ms apart; the batch that the
    first one opens waits for the others (nothing can answer it before every masked input is in)."""
    ids = [f"dev-{i}" for i in range(6)]
    coord = await start_coordinator(rounds=1, min_clients=6, secagg=True, round_timeout_s=30)
    deltas = deltas_for(ids, P_MLP, seed=12)
    spies = []
    outcomes, _ = await asyncio.to_thread(_devices_on_one_transport, coord.port, deltas,
                                          lambda t: spies.append(_BatchSpy(t)))
    assert all(o == ("accepted", "accepted") for o in outcomes.values()), outcomes
    unmask_requests = [b for b in spies[0].batches if pb.SecAggRequest.UNMASK_REQUEST in b]
    assert unmask_requests == [[pb.SecAggRequest.UNMASK_REQUEST] * len(ids)], spies[0].batches
