"""A held SecAgg step waits for its phase only: answered when the phase closes or the coordinator stops."""

from __future__ import annotations

import asyncio

from fedort.edge_client.secagg.client import SecAggClient
from fedort.edge_client.secagg.flow import ADVERTISE
from fedort.edge_client.transport.grpc_transport import ChannelConfig, Transport
from fedort.common.secagg.task import SecAggTask
from coordinator_fixtures import mlp_artifacts, start_coordinator  # noqa: F401
from secagg_devices import CURRENT

IDS = ["dev-0", "dev-1", "dev-2"]


def _advertise_alone(port: int, wait_ms: int) -> tuple[bool, bytes]:
    """dev-0 advertises its keys and waits for the roster; the other two joined but never advertise."""
    with Transport(ChannelConfig(f"127.0.0.1:{port}", insecure=True, rpc_timeout_s=60)) as transport:
        model = ""
        for c in IDS:
            model = transport.join("hold-test", client_id=c, capabilities=CURRENT).model_id
        task = transport.poll(IDS[0], model, 5000)
        keys = SecAggClient(IDS[0], SecAggTask.from_bytes(task.secagg).params).advertise()
        return transport.secagg_step(IDS[0], model, task.round, ADVERTISE, keys.to_bytes(), wait_ms)


async def _until(condition, timeout_s: float = 30.0) -> None:
    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(wait(), timeout_s)


async def test_a_held_step_is_answered_not_ready_once_the_coordinator_releases_its_polls(start_coordinator):
    """Held steps no longer wake on every engine change, so stopping must wake them itself: without that the
    call would stay held for its whole wait (25 s here), past the bounded wait below."""
    coord = await start_coordinator(rounds=1, min_clients=3, secagg=True, secagg_neighbours=2, secagg_threshold=2,
                                    round_timeout_s=120)
    held = asyncio.ensure_future(asyncio.to_thread(_advertise_alone, coord.port, 25_000))
    await _until(lambda: coord.engine.secagg.server is not None and IDS[0] in coord.engine.secagg.server.state.keys)
    assert not held.done()                              # advertise stays open: two clients have not advertised
    coord.engine.release_polls()
    ready, payload = await asyncio.wait_for(held, 15)
    assert (ready, payload) == (False, b"")
