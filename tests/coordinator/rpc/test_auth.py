"""Per-device authentication: every RPC but health needs an enrolled device's token, and a device acts only as itself.

Real coordinators on 127.0.0.1:0 with `auth="token"`, tokens from a real `DeviceStore` in the state dir.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fedort.coordinator.rpc.devices import DeviceStore
from coordinator_fixtures import RPC_TIMEOUT, chunks_of, mlp_artifacts, start_coordinator, update_header  # noqa: F401
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture
async def secured(tmp_path, start_coordinator):  # noqa: F811
    """A token-auth coordinator (1 round, 2 clients), devices client-a and client-b enrolled, and a channel."""
    state = tmp_path / "state"
    store = DeviceStore(state)
    tokens = {cid: store.enroll(cid)[1] for cid in ("client-a", "client-b")}
    coordinator = await start_coordinator(auth="token", rounds=1, state_dir=state)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{coordinator.port}") as channel:
        yield coordinator, pb_grpc.CoordinatorStub(channel), tokens, store, channel


def snapshot(state: Path) -> tuple:
    """The rows a rejected call must not change (clients' last_seen excluded: every RPC may touch it)."""
    con = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)
    try:
        return (con.execute("SELECT client_id, active FROM clients ORDER BY client_id").fetchall(),
                con.execute("SELECT * FROM submissions ORDER BY round, client_id").fetchall(),
                con.execute("SELECT round, state, vector_sha256 FROM rounds ORDER BY round").fetchall())
    finally:
        con.close()


async def join_both(stub, tokens) -> str:
    model = ""
    for cid, token in tokens.items():
        model = (await stub.Join(pb.JoinRequest(client_id=cid), metadata=bearer(token), timeout=RPC_TIMEOUT)).model_id
    return model


async def expect(code: grpc.StatusCode, call) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    assert e.value.code() == code, e.value.details()
    return e.value.details()


async def test_calls_without_a_token_are_unauthenticated_and_health_still_answers(secured):
    coordinator, stub, tokens, _, channel = secured
    for call in (stub.Join(pb.JoinRequest(client_id="client-a"), timeout=RPC_TIMEOUT),
                 stub.PollTask(pb.PollRequest(client_id="client-a", wait_ms=0), timeout=RPC_TIMEOUT),
                 stub.Heartbeat(pb.HeartbeatRequest(client_id="client-a"), timeout=RPC_TIMEOUT),
                 stub.Status(pb.StatusRequest(), timeout=RPC_TIMEOUT)):
        details = await expect(grpc.StatusCode.UNAUTHENTICATED, call)
        assert "requires a device token" in details and "Bearer" in details
    health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=RPC_TIMEOUT)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert snapshot(coordinator.state_dir)[0] == []    # nobody was registered


@pytest.mark.slow
async def test_unknown_and_malformed_tokens_are_unauthenticated(secured):
    _, stub, tokens, _, _ = secured
    forged = tokens["client-a"][:-4] + "0000"
    details = await expect(grpc.StatusCode.UNAUTHENTICATED,
                           stub.Join(pb.JoinRequest(client_id="client-a"), metadata=bearer(forged), timeout=RPC_TIMEOUT))
    assert "not valid here" in details
    details = await expect(grpc.StatusCode.UNAUTHENTICATED,
                           stub.Join(pb.JoinRequest(), metadata=bearer("hunter2"), timeout=RPC_TIMEOUT))
    assert "malformed device token" in details
    details = await expect(grpc.StatusCode.UNAUTHENTICATED,
                           stub.Join(pb.JoinRequest(), metadata=(("authorization", "Basic abc"),), timeout=RPC_TIMEOUT))
    assert "Bearer" in details


@pytest.mark.slow
async def test_the_token_is_the_identity_in_metadata_or_in_the_join_credential(secured):
    _, stub, tokens, _, _ = secured
    reply = await stub.Join(pb.JoinRequest(device_name="phone"), metadata=bearer(tokens["client-a"]), timeout=RPC_TIMEOUT)
    assert reply.client_id == "client-a"           # no client id asked for: the token's
    reply = await stub.Join(pb.JoinRequest(client_id="client-b", credential=tokens["client-b"]), timeout=RPC_TIMEOUT)
    assert reply.client_id == "client-b"           # JoinRequest.credential still works


async def test_a_device_cannot_act_as_another_and_nothing_changes(secured):
    coordinator, stub, tokens, _, _ = secured
    model = await join_both(stub, tokens)
    task = await stub.PollTask(pb.PollRequest(client_id="client-a", model_id=model, wait_ms=5000),
                               metadata=bearer(tokens["client-a"]), timeout=RPC_TIMEOUT + 5)
    assert task.kind == pb.Task.FIT
    before = snapshot(coordinator.state_dir)
    as_a = bearer(tokens["client-a"])
    calls = [
        stub.Join(pb.JoinRequest(client_id="client-b"), metadata=as_a, timeout=RPC_TIMEOUT),
        stub.PollTask(pb.PollRequest(client_id="client-b", model_id=model, wait_ms=0), metadata=as_a, timeout=RPC_TIMEOUT),
        stub.Heartbeat(pb.HeartbeatRequest(client_id="client-b"), metadata=as_a, timeout=RPC_TIMEOUT),
        stub.Leave(pb.LeaveRequest(client_id="client-b", reason="x"), metadata=as_a, timeout=RPC_TIMEOUT),
        stub.SubmitEvaluation(pb.EvaluationResult(client_id="client-b", model_id=model, round=1, num_examples=1),
                              metadata=as_a, timeout=RPC_TIMEOUT),
        stub.SecAggBatch(pb.SecAggBatchRequest(steps=[pb.SecAggRequest(client_id="client-a", model_id=model, round=1),
                                                      pb.SecAggRequest(client_id="client-b", model_id=model, round=1)]),
                         metadata=as_a, timeout=RPC_TIMEOUT),
    ]
    for call in calls:
        details = await expect(grpc.StatusCode.PERMISSION_DENIED, call)
        assert "authenticated as client-a" in details and "client-b" in details
    download = stub.DownloadVector(pb.VectorRequest(client_id="client-b", model_id=model, round=1), metadata=as_a,
                                   timeout=RPC_TIMEOUT)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        async for _ in download:
            pass
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # an update from a with b's name in the header
    vector = np.zeros(task.vector_length, np.float32)
    call = stub.SubmitUpdate(metadata=as_a, timeout=RPC_TIMEOUT)
    await call.write(pb.UpdatePart(header=update_header("client-b", model, 1, vector, 10)))
    for c in chunks_of(vector):
        await call.write(pb.UpdatePart(chunk=c))
    await call.done_writing()
    details = await expect(grpc.StatusCode.PERMISSION_DENIED, call)
    assert "a device may only act as itself" in details
    assert snapshot(coordinator.state_dir) == before
    assert coordinator.engine.round == 1 and coordinator.state.name == "TRAINING"


async def test_a_revoked_token_is_refused_on_the_next_call(secured):
    _, stub, tokens, store, _ = secured
    as_a = bearer(tokens["client-a"])
    await stub.Join(pb.JoinRequest(client_id="client-a"), metadata=as_a, timeout=RPC_TIMEOUT)
    await stub.Heartbeat(pb.HeartbeatRequest(client_id="client-a"), metadata=as_a, timeout=RPC_TIMEOUT)
    store.revoke("client-a")
    details = await expect(grpc.StatusCode.UNAUTHENTICATED,
                           stub.Heartbeat(pb.HeartbeatRequest(client_id="client-a"), metadata=as_a, timeout=RPC_TIMEOUT))
    assert "revoked" in details
    # the other device is unaffected
    await stub.Join(pb.JoinRequest(client_id="client-b"), metadata=bearer(tokens["client-b"]), timeout=RPC_TIMEOUT)


def test_tokens_are_stored_only_as_salted_hashes(tmp_path):
    store = DeviceStore(tmp_path)
    device, token = store.enroll("kitchen-sensor")
    assert device.client_id == "kitchen-sensor" and token.startswith("fedort_kitchen-sensor_")
    secret = token.rsplit("_", 1)[1]
    assert store.verify(token) == "kitchen-sensor"
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("devices.db"))
    for needle in (secret, token, hashlib.sha256(secret.encode()).hexdigest()):
        assert needle.encode() not in raw
    assert hashlib.sha256(secret.encode()).digest() not in raw   # salted: not the bare sha256 either
    assert [d.client_id for d in store.devices()] == ["kitchen-sensor"]
