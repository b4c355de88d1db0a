"""Per-client limits: concurrent streams and submission rate -> RESOURCE_EXHAUSTED, the server stays responsive.

Real coordinators on 127.0.0.1:0 (open auth: limits key on the client id either way).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fedort.coordinator.uploads.client_limits import RateLimiter
from coordinator_fixtures import (  # noqa: F401
    RPC_TIMEOUT, chunks_of, mlp_artifacts, start_coordinator, stub_client, update_header,
)
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.common.errors import ResourceExhaustedError


def submissions(state) -> list[tuple]:
    con = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)
    try:
        return con.execute("SELECT round, client_id, sha256 FROM submissions ORDER BY client_id").fetchall()
    finally:
        con.close()


async def healthy(channel) -> bool:
    reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=RPC_TIMEOUT)
    return reply.status == health_pb2.HealthCheckResponse.SERVING


async def both_training(client) -> tuple[str, pb.Task]:
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    task = await client.poll("client-a", model)
    assert task.kind == pb.Task.FIT
    assert (await client.poll("client-b", model)).kind == pb.Task.FIT
    return model, task


async def download(client, cid: str, model: str) -> np.ndarray:
    return (await client.download_vector(cid, model, 1))[1]


async def test_a_client_over_its_stream_limit_is_refused_while_others_are_served(start_coordinator, stub_client):
    # Under load the steps below can take longer than the fixture's 20 s round deadline or the 30 s
    # idle timeout of the held upload; neither is what this test is about, so both are out of reach.
    coordinator = await start_coordinator(rounds=1, max_streams_per_client=1, round_timeout_s=600,
                                          stream_idle_timeout_s=600)
    client = stub_client(coordinator.port)
    model, task = await both_training(client)
    vector = await download(client, "client-a", model)
    update = vector + np.float32(0.5)

    held = client.stub.SubmitUpdate(timeout=RPC_TIMEOUT)          # an upload a holds open: header, no chunks yet
    await held.write(pb.UpdatePart(header=update_header("client-a", model, 1, update, 10)))
    # Wait until the server holds the upload (it then counts in the upload-slot gauge), without
    # opening any stream of client-a meanwhile: such a stream would race the upload for the slot.
    deadline = time.monotonic() + 120
    while coordinator.monitoring.registry.get_sample_value("fedort_upload_slots_in_use") != 1:
        assert held.done() is False, "the held upload ended early"
        assert time.monotonic() < deadline, "the server never took the held upload's header"
        await asyncio.sleep(0.02)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await download(client, "client-a", model)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value.details()
    assert "already has 1 streams open (limit 1 per client)" in e.value.details()

    assert np.array_equal(await download(client, "client-b", model), vector)   # another client is served
    assert await healthy(client.channel)
    assert submissions(coordinator.state_dir) == []

    for c in chunks_of(update):
        await held.write(pb.UpdatePart(chunk=c))
    await held.done_writing()
    assert (await held).accepted                                  # the held upload itself completes
    assert np.array_equal(await download(client, "client-a", model), vector)   # and its slot is free again


async def test_a_client_over_its_submission_rate_is_refused_and_nothing_changes(start_coordinator, stub_client):
    coordinator = await start_coordinator(rounds=1, submissions_per_minute=1)
    client = stub_client(coordinator.port)
    model, _ = await both_training(client)
    vector = await download(client, "client-a", model)
    assert (await client.submit("client-a", model, 1, vector + np.float32(1), 10)).accepted
    before = submissions(coordinator.state_dir)

    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit("client-a", model, 1, vector + np.float32(2), 10)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "client-a exceeded 1 submissions per minute; retry in" in e.value.details()
    assert submissions(coordinator.state_dir) == before
    assert coordinator.engine.round == 1 and coordinator.state.name == "TRAINING"
    assert await healthy(client.channel)

    assert (await client.submit("client-b", model, 1, vector + np.float32(3), 10)).accepted   # b has its own bucket
    outcome = await asyncio.wait_for(coordinator.wait_done(), 60)
    assert outcome.rounds_completed == 1


def test_the_submission_bucket_refills_at_the_configured_rate():
    now = [0.0]
    limiter = RateLimiter(per_minute=2, clock=lambda: now[0])
    limiter.take("c")
    limiter.take("c")                         # a burst of 2
    with pytest.raises(ResourceExhaustedError, match="retry in 30.0 s"):
        limiter.take("c")
    now[0] = 30.0                             # one token back after 60/2 s
    limiter.take("c")
    with pytest.raises(ResourceExhaustedError):
        limiter.take("c")
    RateLimiter(per_minute=0).take("c")       # 0 disables
