"""Join refuses a device that declares it cannot do what the run requires, naming what it lacks; devices that
declare no runtime (the Python edge client, older devices) join as before."""

from __future__ import annotations

import grpc
import pytest

from coordinator_fixtures import RPC_TIMEOUT, mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.protos import fedort_v1_pb2 as pb

BROWSER = {"runtime": "web", "codecs": "raw,fp16,int8"}


async def join(client, capabilities: dict[str, str]) -> pb.JoinReply:
    return await client.stub.Join(pb.JoinRequest(client_id="client-a", device_name="tab", capabilities=capabilities),
                                  timeout=RPC_TIMEOUT)


@pytest.mark.parametrize("config, lacks", [
    ({"secagg": True, "min_clients": 3}, "secure aggregation"),
    ({"codecs": ("topk:0.1",)}, "top-k updates with error feedback"),
    ({"codecs": ("bf16",)}, "an update codec of this run"),
])
async def test_a_browser_device_is_refused_what_it_cannot_do(start_coordinator, stub_client, config, lacks):
    coord = await start_coordinator(**config)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await join(stub_client(coord.port), BROWSER)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"web device cannot take part in this run: it lacks {lacks}" in err.value.details()
    assert len(coord.engine.registry) == 0


@pytest.mark.parametrize("config", [{}, {"codecs": ("fp16", "topk:0.1")}])
async def test_a_browser_device_joins_a_run_it_can_do(start_coordinator, stub_client, config):
    coord = await start_coordinator(**config)
    assert (await join(stub_client(coord.port), BROWSER)).client_id == "client-a"


async def test_a_device_naming_no_runtime_joins_a_secure_run_as_before(start_coordinator, stub_client):
    coord = await start_coordinator(secagg=True, min_clients=3)
    assert (await join(stub_client(coord.port), {"secagg_schemes": ""})).client_id == "client-a"
