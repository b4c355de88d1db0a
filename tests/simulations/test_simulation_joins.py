"""A simulation's coordinator admits its whole population of virtual clients at once: they all join from
one loopback address, which the deployed per-address join rate would throttle."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from coordinator_fixtures import RPC_TIMEOUT, mlp_artifacts  # noqa: F401
from fedort.coordinator.server import Coordinator
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc
from fedort.simulations.config import load_config
from fedort.simulations.coordinator_settings import coordinator_config


@pytest.mark.slow
async def test_a_thousand_virtual_clients_join_from_one_address_without_being_throttled(mlp_artifacts, tmp_path):
    cfg = load_config(None, {"clients": 1000, "clients_per_round": 100, "rounds": 1})
    coordinator = Coordinator(coordinator_config(cfg, mlp_artifacts, tmp_path / "state", None, 1000))
    port = await coordinator.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.CoordinatorStub(channel)
            for batch in range(10):        # 1,000 joins, 100 in flight: beyond the deployed 600 per minute
                replies = await asyncio.gather(*(
                    stub.Join(pb.JoinRequest(client_id=f"sim-{batch:02d}{i:02d}"), timeout=RPC_TIMEOUT)
                    for i in range(100)))
                assert all(r.client_id for r in replies)
        assert len(coordinator.engine.registry.available()) == 1000
    finally:
        await asyncio.wait_for(coordinator.stop(grace=0), 20)
