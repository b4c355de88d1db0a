"""The Coordinator over real gRPC on 127.0.0.1:0: a full run, health, status, artifacts, long-poll."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import grpc
import numpy as np
import onnxruntime as ort
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fedort.coordinator import RoundState
from coordinator_fixtures import P_MLP, mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.ort.artifacts import ARTIFACT_FILES, load_manifest
from fedort.protos.stubs import fedort_v1_pb2 as pb


async def test_two_clients_complete_two_rounds_with_weighted_average(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=2)
    client = stub_client(coord.port)
    a = await client.join("client-a")
    await client.join("client-b")
    model = a.model_id
    for round in (1, 2):
        ta, va, ra = await client.fit_round("client-a", model, delta=1.0, num_examples=30)
        tb, vb, rb = await client.fit_round("client-b", model, delta=4.0, num_examples=10)
        assert (ta.round, tb.round) == (round, round)
        assert ra.accepted and rb.accepted and not ra.duplicate
        np.testing.assert_array_equal(va, vb)
    outcome = await asyncio.wait_for(coord.wait_done(), 60)
    assert outcome.state is RoundState.DONE and outcome.rounds_completed == 2
    _, start = await client.download_vector("client-a", model, 1)
    _, final = await client.download_vector("client-a", model, 3)
    # each round adds the example-weighted mean delta (30*1 + 10*4) / 40 = 1.75
    np.testing.assert_allclose(final, start + 2 * 1.75, atol=1e-6)
    done = await client.poll("client-b", model, wait_ms=0)
    assert done.kind == pb.Task.DONE


@pytest.mark.slow
async def test_each_round_exports_a_model_plain_onnxruntime_runs(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=2)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    for _ in range(2):
        await client.fit_round("client-a", model, 0.01, 5, {"train_loss": (1.0, True)})
        await client.fit_round("client-b", model, 0.02, 15, {"train_loss": (2.0, True), "local_only": (9.0, False)})
    await asyncio.wait_for(coord.wait_done(), 60)
    models = coord.state_dir / "models"
    for round in (1, 2):
        folder = models / f"round-{round:04d}"
        record = json.loads((folder / "model.json").read_text())
        assert record["round"] == round and record["clients"] == 2 and record["examples"] == 20
        assert record["metrics"] == {"train_loss": pytest.approx(1.75)}
        assert record["model_sha256"] == hashlib.sha256((folder / "model.onnx").read_bytes()).hexdigest()
        session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
        (logits,) = session.run(None, {"x": np.zeros((3, 64), np.float32)})
        assert logits.shape == (3, 10)
    latest = json.loads((models / "latest.json").read_text())
    assert latest["round"] == 2 and (models / latest["model"]).is_file()


async def test_health_service_answers_serving(start_coordinator):
    coord = await start_coordinator()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{coord.port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "fedort.v1.Coordinator"):
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.slow
async def test_join_lists_the_artifacts_and_download_matches_their_sha256(start_coordinator, stub_client,
                                                                          mlp_artifacts):
    coord = await start_coordinator()
    client = stub_client(coord.port)
    reply = await client.join(device_name="phone")
    assert reply.client_id.startswith("c-") and len(reply.client_id) == 14
    manifest = load_manifest(mlp_artifacts)
    assert reply.model_id == manifest.model_id
    assert {a.name for a in reply.artifacts} == set(ARTIFACT_FILES)
    info = {a.name: a for a in reply.artifacts}["checkpoint"]
    parts = [p async for p in client.stub.DownloadArtifact(
        pb.ArtifactRequest(client_id=reply.client_id, model_id=reply.model_id, name="checkpoint"), timeout=5)]
    assert parts[0].header.sha256 == info.sha256
    data = b"".join(p.chunk for p in parts[1:])
    assert hashlib.sha256(data).digest() == info.sha256 and len(data) == info.size


async def test_rejoin_with_the_same_id_keeps_the_identity(start_coordinator, stub_client):
    coord = await start_coordinator()
    client = stub_client(coord.port)
    first = await client.join("client-0007")
    again = await client.join("client-0007")
    assert first.client_id == again.client_id == "client-0007"
    status = await client.stub.Status(pb.StatusRequest(), timeout=5)
    assert status.registered_clients == 1


async def test_bad_client_id_format_is_invalid_argument(start_coordinator, stub_client):
    coord = await start_coordinator()
    client = stub_client(coord.port)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.join("bad id/with slash")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def until_held(coord, client_id: str, since: float, call: asyncio.Future, timeout: float = 30.0) -> None:
    """Until `client_id`'s PollTask (`call`, started after time.time() was `since`) is held by the engine: its poll
    touched the client after `since`, and from that touch to the engine's wait nothing yields to the loop.
    (A fixed sleep here let a slow call reach the server after the event the test then causes.)"""
    deadline = asyncio.get_running_loop().time() + timeout
    while coord.engine.registry.require(client_id).last_seen <= since:
        assert not call.done(), f"the poll ended before it was held: {call.result()}"
        assert asyncio.get_running_loop().time() < deadline, f"{client_id}'s poll did not reach the server in {timeout} s"
        await asyncio.sleep(0.01)


async def test_long_poll_wakes_when_the_round_opens(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=2)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    since = time.time()
    waiting = asyncio.ensure_future(client.poll("client-a", model, wait_ms=30_000))
    await until_held(coord, "client-a", since, waiting)
    assert not waiting.done()          # one client is not enough: the call is held
    await client.join("client-b")      # the second client makes the round open
    task = await asyncio.wait_for(waiting, 20)   # before the 30 s hold would end
    assert task.kind == pb.Task.FIT and task.round == 1   # FIT, not the WAIT that ends a hold
    assert task.vector_length == P_MLP and len(task.vector_sha256) == 32
    assert task.config.local_epochs == 1 and task.config.batch_size == 32


async def test_poll_without_work_returns_wait_after_the_hold(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=2)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    task = await client.poll("client-a", model, wait_ms=300)
    assert task.kind == pb.Task.WAIT


async def test_download_vector_of_a_future_round_is_not_found(start_coordinator, stub_client):
    coord = await start_coordinator()
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.download_vector("client-a", model, 5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "latest round is 1" in err.value.details()


async def test_status_rpc_reports_rounds_and_clients(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.fit_round("client-a", model, 1.0, 3)
    await client.fit_round("client-b", model, 1.0, 3)
    await asyncio.wait_for(coord.wait_done(), 60)
    status = await client.stub.Status(pb.StatusRequest(), timeout=5)
    assert status.state == "DONE" and status.total_rounds == 1 and status.registered_clients == 2
    assert [(r.round, r.state, r.clients, r.examples) for r in status.rounds] == [(1, "EXPORTED", 2, 6)]
    assert status.latest_model.endswith("round-0001/model.onnx")


async def test_leave_makes_a_client_unselectable(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=2)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.stub.Leave(pb.LeaveRequest(client_id="client-a", reason="battery"), timeout=5)
    await client.join("client-b")
    assert (await client.poll("client-b", model, wait_ms=300)).kind == pb.Task.WAIT
    await client.join("client-a")      # rejoining re-activates it, and the round can open
    assert (await client.poll("client-a", model, wait_ms=3000)).kind == pb.Task.FIT


@pytest.mark.slow
async def test_memory_does_not_grow_with_the_number_of_updates(tmp_path, stub_client):
    """50 updates of a 5 M-parameter vector: peak traced memory stays a few vectors, not 50."""
    import tracemalloc

    from fedort.coordinator import Coordinator
    from coordinator_fixtures import chunks_of, make_config, update_header
    from fedort.ort.artifacts import build_artifacts
    from fedort.ort.models import mlp

    manifest = build_artifacts(mlp(hidden=67_000), tmp_path / "big")
    p = manifest.parameter_count
    assert p > 5_000_000
    clients = [f"client-{i:04d}" for i in range(50)]
    tracemalloc.start()
    coord = Coordinator(make_config(tmp_path / "big", tmp_path / "state", rounds=1, min_clients=50))
    try:
        await coord.start()
        client = stub_client(coord.port)
        model = [await client.join(c) for c in clients][0].model_id
        _, base = await client.download_vector(clients[0], model, 1)
        update = base + np.float32(1)
        chunks = [pb.UpdatePart(chunk=c) for c in chunks_of(update)]
        tracemalloc.reset_peak()
        for i, cid in enumerate(clients):
            header = update_header(cid, model, 1, update, i + 1)
            reply = await client.submit_parts([pb.UpdatePart(header=header), *chunks])
            assert reply.accepted and not reply.duplicate
        outcome = await asyncio.wait_for(coord.wait_done(), 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await coord.stop(grace=0)
    assert outcome.state is RoundState.DONE
    final = np.fromfile(tmp_path / "state" / "vectors" / "round-0002.f32", dtype="<f4")
    np.testing.assert_allclose(final, update, atol=1e-6)
    vector_bytes = 4 * p
    assert peak < 10 * vector_bytes, f"peak {peak / 2**20:.0f} MiB for 50 updates of {vector_bytes / 2**20:.0f} MiB"


async def test_stop_answers_held_long_polls_instead_of_waiting_for_them(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=2)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    since = time.time()
    held = asyncio.ensure_future(client.poll("client-a", model, wait_ms=30_000))
    await until_held(coord, "client-a", since, held)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await coord.stop(grace=60)
    assert loop.time() - t0 < 15.0     # not the 30 s hold, nor the 60 s grace
    assert (await held).kind == pb.Task.WAIT


async def test_an_unplanned_error_is_internal_naming_it_and_the_server_keeps_serving(start_coordinator, stub_client,
                                                                                   caplog):
    coord = await start_coordinator()
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    (coord.state_dir / "artifacts" / ARTIFACT_FILES[0]).unlink()   # pulled from under the running server
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in client.stub.DownloadArtifact(
                pb.ArtifactRequest(client_id="client-a", model_id=model, name=ARTIFACT_FILES[0]), timeout=10):
            pass
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert err.value.details().startswith("internal error: FileNotFoundError")
    assert "DownloadArtifact failed unexpectedly" in caplog.text          # logged with its traceback
    assert (await client.poll("client-a", model, wait_ms=0)).kind in (pb.Task.WAIT, pb.Task.FIT)
