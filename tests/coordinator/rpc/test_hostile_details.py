"""Smaller bounds against hostile devices: private file modes, a round no run reaches, bounded /metrics
threads, the co-located directory told only to local callers, and a revoked token stopping an upload
already under way."""

from __future__ import annotations

import asyncio
import socket
import stat
import threading
import urllib.request

import grpc
import numpy as np
import pytest

from coordinator_fixtures import (RPC_TIMEOUT, mlp_artifacts, opened_round, start_coordinator,  # noqa: F401
                                  stub_client, update_header, chunks_of)
from fedort.coordinator.rpc.devices import DeviceStore
from fedort.coordinator.rpc.monitoring import MAX_SCRAPES
from fedort.coordinator.rpc.servicer import is_local_peer
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_spool_files_and_the_state_database_are_the_owners_only(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client, keep_spool=True,
                                                           inline_update_bytes=0)
    assert (await client.submit("client-a", model, round, g, 10)).accepted
    spooled = coord.engine.store.spool_path(round, "client-a")
    assert _mode(spooled) == 0o600
    assert _mode(coord.state_dir / "state.db") == 0o600


def test_the_device_database_is_the_owners_only(tmp_path):
    DeviceStore(tmp_path).enroll("client-a")
    assert all(_mode(p) == 0o600 for p in tmp_path.glob("devices.db*")) and list(tmp_path.glob("devices.db*"))


async def test_a_header_with_round_2_64_minus_1_is_invalid_argument(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit("client-a", model, (1 << 64) - 1, g, 10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"round must be in 0..{(1 << 63) - 1}, got {(1 << 64) - 1}" in e.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.download_vector("client-a", model, (1 << 64) - 1)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def _scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read()


@pytest.mark.slow
async def test_idle_metrics_connections_hold_at_most_a_few_threads_and_scrapes_go_on(start_coordinator):
    coord = await start_coordinator(metrics_address="127.0.0.1:0")
    idle = [socket.create_connection(("127.0.0.1", coord.metrics_port)) for _ in range(50)]
    try:
        await asyncio.sleep(0.2)             # the server accepts them (no condition to wait for: they send nothing)
        scrapers = [t for t in threading.enumerate() if t.name.startswith("fedort-metrics-scrape")]
        assert len(scrapers) <= MAX_SCRAPES
    finally:
        for s in idle:
            s.close()
    loop = asyncio.get_running_loop()
    until = loop.time() + 30
    while True:                              # once the idle connections are gone, scrapes are served again
        try:
            assert b"fedort_round" in await asyncio.to_thread(_scrape, coord.metrics_port)
            break
        except OSError:
            assert loop.time() < until, "no scrape served after the idle connections closed"
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("peer, local", [("ipv4:127.0.0.1:5123", True), ("ipv6:[::1]:5123", True),
                                         ("unix:/tmp/s", True), ("ipv4:10.0.0.7:5123", False),
                                         ("ipv6:[2001:db8::1]:5123", False)])
def test_only_a_caller_on_this_host_is_told_the_local_vector_dir(peer, local):
    assert is_local_peer(peer) is local


async def test_a_revoked_token_stops_an_upload_already_streaming(start_coordinator, tmp_path):
    state = tmp_path / "state"
    store = DeviceStore(state)
    token = store.enroll("client-a")[1]
    coord = await start_coordinator(auth="token", rounds=1, min_clients=1, state_dir=state, stream_idle_timeout_s=60,
                                    upload_min_rate_bytes_s=1.0, upload_grace_s=60)
    auth = (("authorization", f"Bearer {token}"),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{coord.port}") as channel:
        stub = pb_grpc.CoordinatorStub(channel)
        model = (await stub.Join(pb.JoinRequest(client_id="client-a"), metadata=auth, timeout=RPC_TIMEOUT)).model_id
        task = await stub.PollTask(pb.PollRequest(client_id="client-a", model_id=model, wait_ms=5000), metadata=auth,
                                   timeout=RPC_TIMEOUT)
        g = np.zeros(coord.engine.length, np.float32)
        call = stub.SubmitUpdate(metadata=auth, timeout=60)
        await call.write(pb.UpdatePart(header=update_header("client-a", model, task.round, g, 10,
                                                            trained_from=task.vector_sha256)))
        store.revoke("client-a")
        try:
            for chunk in chunks_of(g, 64):       # slowly: the server checks the token again within a second
                await call.write(pb.UpdatePart(chunk=chunk))
                await asyncio.sleep(0.05)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass
        assert await call.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "revoked" in await call.details()
    assert coord.engine.store.submissions(task.round) == []


async def test_downloads_of_an_old_round_share_one_copy_of_its_vector(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=2, min_clients=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.fit_round("client-a", model, 0.5, 10)
    task = await client.poll("client-a", model)
    assert task.kind == pb.Task.FIT and task.round == 2              # round 1 is now an old round
    first = coord.engine.vector_for("client-a", model, 1)
    second = coord.engine.vector_for("client-a", model, 1)
    assert first.vector is second.vector and not first.vector.flags.writeable
    _, streamed = await client.download_vector("client-a", model, 1)
    np.testing.assert_array_equal(streamed, first.vector)
