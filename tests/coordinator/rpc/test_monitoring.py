"""Operators' views of a running coordinator: Prometheus metrics over HTTP (parsed with
prometheus_client's own parser) and gRPC server reflection (listed with the reflection client)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from prometheus_client.parser import text_string_to_metric_families

from coordinator_fixtures import P_MLP, mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.coordinator.rpc.devices import DeviceStore
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics as {(name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.mark.slow
async def test_metrics_count_rounds_updates_bytes_and_clients(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=2, metrics_address="127.0.0.1:0")
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.fit_round("client-a", model, delta=1.0, num_examples=30)
    await client.fit_round("client-b", model, delta=4.0, num_examples=10)
    assert (await client.poll("client-a", model)).round == 2             # round 1 committed
    with pytest.raises(grpc.aio.AioRpcError):                            # a stale update: refused
        await client.submit("client-a", model, 1, (await client.download_vector("client-a", model, 1))[1], 5)
    m = await asyncio.to_thread(scrape, coord.metrics_port)
    assert m[("fedort_rounds_committed_total", ())] == 1
    assert m[("fedort_rounds_failed_total", ())] == 0
    assert m[("fedort_round_duration_seconds_count", ())] == 1
    assert m[("fedort_round", ())] == 2
    assert m[("fedort_round_state", (("state", "TRAINING"),))] == 1
    assert m[("fedort_updates_total", (("reason", ""), ("result", "accepted")))] == 2
    assert m[("fedort_updates_total", (("reason", "FAILED_PRECONDITION"), ("result", "refused")))] == 1
    assert m[("fedort_rpc_errors_total", (("code", "FAILED_PRECONDITION"), ("method", "SubmitUpdate")))] == 1
    assert m[("fedort_bytes_total", (("direction", "in"),))] >= 2 * 4 * P_MLP
    assert m[("fedort_bytes_total", (("direction", "out"),))] >= 3 * 4 * P_MLP
    assert m[("fedort_clients", (("state", "registered"),))] == 2
    assert m[("fedort_clients", (("state", "active"),))] == 2
    assert m[("fedort_clients", (("state", "selected"),))] == 2
    assert m[("fedort_upload_slots_in_use", ())] == 0
    assert m[("fedort_storage_errors_total", ())] == 0


@pytest.mark.slow
async def test_metrics_count_auth_failures(start_coordinator, tmp_path):
    DeviceStore(tmp_path / "state").enroll("dev")
    coord = await start_coordinator(auth="token", metrics_address="127.0.0.1:0")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{coord.port}") as channel:
        stub = pb_grpc.CoordinatorStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Join(pb.JoinRequest(device_name="x", credential="fedort_dev_" + "0" * 64), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    m = await asyncio.to_thread(scrape, coord.metrics_port)
    assert m[("fedort_auth_failures_total", ())] == 1


async def test_reflection_lists_and_describes_the_services(start_coordinator):
    coord = await start_coordinator()

    def describe() -> tuple[list[str], list[str]]:
        with grpc.insecure_channel(f"127.0.0.1:{coord.port}") as channel:
            db = ProtoReflectionDescriptorDatabase(channel)
            services = sorted(db.get_services())
            methods = [m.name for m in DescriptorPool(db).FindServiceByName("fedort.v1.Coordinator").methods]
        return services, methods

    services, methods = await asyncio.wait_for(asyncio.to_thread(describe), 30)
    assert {"fedort.v1.Coordinator", "grpc.health.v1.Health"} <= set(services)
    assert {"Join", "PollTask", "SubmitUpdate", "Status"} <= set(methods)


def fedort(*args: str) -> list[str]:
    exe = Path(sys.executable).with_name("fedort")
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "fedort", *args]


@pytest.mark.slow
async def test_status_json_is_one_object_scripts_can_read(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=3)
    client = stub_client(coord.port)
    await client.join("client-a")
    await client.join("client-b")
    done = await asyncio.to_thread(subprocess.run, fedort("coordinator", "status", "--state-dir", str(coord.state_dir),
                                                          "--json"), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["total_rounds"] == 3 and status["registered_clients"] == 2
    assert status["model_id"] == coord.engine.model_id and isinstance(status["rounds"], list)


@pytest.mark.slow
async def test_status_watch_prints_again_until_interrupted(start_coordinator):
    coord = await start_coordinator(rounds=3)
    proc = await asyncio.create_subprocess_exec(
        *fedort("coordinator", "status", "--state-dir", str(coord.state_dir), "--json", "--watch", "0.1"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        lines = [json.loads(await asyncio.wait_for(proc.stdout.readline(), 60)) for _ in range(2)]
    finally:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.communicate(), 30)
    assert [line["total_rounds"] for line in lines] == [3, 3]
    assert proc.returncode in (0, 130)
