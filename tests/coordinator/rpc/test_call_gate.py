"""coordinator.call_gate: a call without a valid token costs the coordinator almost nothing — its
request is not read unless it is one of a few token-less Joins — and small methods take small
requests, so a flood of oversized unauthenticated calls leaves an honest device's heartbeat answered."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from chaos_support import serve_command
from coordinator_fixtures import RPC_TIMEOUT, mlp_artifacts, start_coordinator  # noqa: F401 (fixtures)
from fedort.coordinator.rpc.call_gate import SMALL_MESSAGE_BYTES
from fedort.coordinator.rpc.devices import DeviceStore
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc

FLOOD = 150
FLOOD_BYTES = 8 << 20
BIG = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]


def bearer(token: str) -> tuple:
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture
async def secured(start_coordinator, tmp_path):
    state = tmp_path / "state"
    token = DeviceStore(state).enroll("client-a")[1]
    coordinator = await start_coordinator(auth="token", rounds=1, state_dir=state)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{coordinator.port}", options=BIG) as channel:
        yield coordinator, pb_grpc.CoordinatorStub(channel), token


async def test_an_authenticated_heartbeat_over_the_small_message_limit_is_invalid_argument(secured):
    _, stub, token = secured
    await stub.Join(pb.JoinRequest(client_id="client-a"), metadata=bearer(token), timeout=RPC_TIMEOUT)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.Heartbeat(pb.HeartbeatRequest(client_id="a" * (SMALL_MESSAGE_BYTES + 1)), metadata=bearer(token),
                             timeout=RPC_TIMEOUT)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"Heartbeat requests must be at most {SMALL_MESSAGE_BYTES} bytes" in e.value.details()


async def test_a_bad_token_is_refused_before_the_request_is_read(secured):
    _, stub, _ = secured
    with pytest.raises(grpc.aio.AioRpcError) as e:   # 8 MB the server never reads: refused as a bad token
        await stub.Join(pb.JoinRequest(device_name="x" * FLOOD_BYTES), metadata=bearer("client-a.bogus"),
                        timeout=RPC_TIMEOUT)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc status")


async def _flood_and_heartbeat(port: int, token: str, pid: int) -> tuple[list, pb.HeartbeatReply, float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as honest:
        stub = pb_grpc.CoordinatorStub(honest)
        await stub.Join(pb.JoinRequest(client_id="client-a"), metadata=bearer(token), timeout=RPC_TIMEOUT)
        before = _peak_rss_kib(pid)
        body = pb.JoinRequest(device_name="x" * FLOOD_BYTES).SerializeToString()
        options = BIG + [("grpc.use_local_subchannel_pool", 1)]   # ten connections, not one shared
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) for _ in range(10)]
        try:
            joins = [c.unary_unary("/fedort.v1.Coordinator/Join") for c in channels]
            calls = [asyncio.ensure_future(joins[i % 10](body, timeout=60)) for i in range(FLOOD)]
            done, _ = await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)   # the flood is under way
            beat = await stub.Heartbeat(pb.HeartbeatRequest(client_id="client-a"), metadata=bearer(token), timeout=10)
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
        finally:
            for c in channels:
                await c.close()
        return outcomes, beat, (_peak_rss_kib(pid) - before) / 1024


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/status")
def test_150_oversized_unauthenticated_joins_are_refused_and_an_honest_heartbeat_answers(tmp_path, mlp_artifacts):
    state = tmp_path / "state"
    token = DeviceStore(state).enroll("client-a")[1]
    port_file = tmp_path / "port"
    log = open(tmp_path / "coordinator.log", "wb")
    proc = subprocess.Popen(serve_command(mlp_artifacts, state, port_file, rounds=1) + ["--auth", "token"],
                            stdout=subprocess.DEVNULL, stderr=log)
    try:
        for _ in range(3000):
            if port_file.exists() or proc.poll() is not None:
                break
            asyncio.run(asyncio.sleep(0.01))
        assert port_file.exists(), (tmp_path / "coordinator.log").read_text()
        outcomes, beat, grown_mib = asyncio.run(_flood_and_heartbeat(int(port_file.read_text()), token, proc.pid))
        assert beat.state                                          # the honest device got its answer
        codes = {o.code() if isinstance(o, grpc.aio.AioRpcError) else "answered" for o in outcomes}
        assert codes <= {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT,
                         grpc.StatusCode.UNAUTHENTICATED}, codes
        assert grown_mib < 100, f"peak RSS grew {grown_mib:.0f} MiB under {FLOOD} unauthenticated 8 MB calls"
    finally:
        proc.kill()
        proc.wait(10)
        log.close()
