"""coordinator.upload_progress: progress, not presence, holds an upload slot. 16 devices that each hold
an upload open and send a byte now and then (as many as there are slots) do not keep 3 honest devices
out: the trickling uploads lose their slots after one rate window, the honest updates get in and the
round (or, in async mode, the version) commits with them."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest

from coordinator_fixtures import mlp_artifacts, start_coordinator, stub_client, update_header  # noqa: F401
from fedort.coordinator.uploads.progress import ProgressRule
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.common.round_state import RoundState

HONEST = ("honest-a", "honest-b", "honest-c")
TRICKLING = tuple(f"trickle-{i:02d}" for i in range(16))
SETTINGS = dict(max_concurrent_uploads=16, uploads_per_client=1, upload_min_rate_bytes_s=1000.0,
                upload_rate_window_s=0.5, upload_grace_s=0.5, stream_idle_timeout_s=120, upload_slot_wait_s=30)


def test_the_whole_upload_deadline_is_grace_plus_bytes_at_the_minimum_rate():
    assert ProgressRule(min_rate=1000.0, window_s=1.0, grace_s=2.0).deadline_s(38_440) == pytest.approx(40.44)


async def _trickle(client, cid: str, model: str, round: int, vector: np.ndarray, stop: asyncio.Event) -> set:
    """Open uploads again and again, each sending its header and then a byte every 0.1 s; the codes they end with."""
    codes = set()
    while not stop.is_set():
        call = client.stub.SubmitUpdate(timeout=60)
        try:
            await call.write(pb.UpdatePart(header=update_header(cid, model, round, vector, 10)))
            while not stop.is_set():
                await call.write(pb.UpdatePart(chunk=b"\0"))
                await asyncio.sleep(0.1)      # the attacker's pace, not synchronisation
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass
        call.cancel()
        codes.add(await call.code())
    return codes


async def _honest(client, cid: str, model: str) -> pb.SubmitReply:
    """Poll, download, submit; on UNAVAILABLE or RESOURCE_EXHAUSTED retry after a backoff, as a device does."""
    task = await client.poll(cid, model)
    _, g = await client.download_vector(cid, model, task.round)
    for _ in range(100):
        try:
            return await client.submit(cid, model, task.round, (g + np.float32(0.5)).astype(np.float32), 10)
        except grpc.aio.AioRpcError as e:
            if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
                raise
            await asyncio.sleep(0.1)
    raise AssertionError(f"{cid} never got its update in")


async def _attack(coord, client, model: str) -> tuple[list, set]:
    for cid in TRICKLING:
        assert (await client.poll(cid, model)).kind == pb.Task.FIT
    _, g = await client.download_vector(TRICKLING[0], model, 1)
    stop = asyncio.Event()
    tricklers = [asyncio.create_task(_trickle(client, cid, model, 1, g, stop)) for cid in TRICKLING]
    slots = coord.engine.uploads.slots
    loop = asyncio.get_running_loop()
    until = loop.time() + 10
    while slots.in_use < 16:                  # every slot held by a trickling upload
        assert loop.time() < until, "the trickling uploads never held every slot"
        await asyncio.sleep(0.02)
    try:
        replies = await asyncio.wait_for(asyncio.gather(*(_honest(client, cid, model) for cid in HONEST)), 20)
    finally:
        stop.set()
        codes = set().union(*await asyncio.wait_for(asyncio.gather(*tricklers), 20))
    return replies, codes


@pytest.mark.slow
async def test_sixteen_trickling_devices_beside_three_honest_ones_the_round_commits(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=1, min_clients=3, min_available_clients=19, round_timeout_s=6,
                                    max_round_attempts=1, **SETTINGS)
    client = stub_client(coord.port)
    model = (await client.join(HONEST[0])).model_id
    for cid in HONEST[1:] + TRICKLING:
        await client.join(cid)
    replies, codes = await _attack(coord, client, model)
    assert all(r.accepted for r in replies)
    assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes       # trickling uploads were dropped for being too slow
    outcome = await asyncio.wait_for(coord.wait_done(), 20)
    assert outcome.state is RoundState.DONE
    assert sorted(s.client_id for s in coord.engine.store.submissions(1)) == sorted(HONEST)


@pytest.mark.slow
async def test_sixteen_trickling_devices_beside_three_honest_ones_an_async_version_commits(start_coordinator,
                                                                                          stub_client):
    coord = await start_coordinator(mode="async", rounds=1, buffer_size=3, min_clients=1, round_timeout_s=30,
                                    **SETTINGS)
    client = stub_client(coord.port)
    model = (await client.join(HONEST[0])).model_id
    for cid in HONEST[1:] + TRICKLING:
        await client.join(cid)
    replies, codes = await _attack(coord, client, model)
    assert all(r.accepted for r in replies)
    assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes
    outcome = await asyncio.wait_for(coord.wait_done(), 20)
    assert outcome.state is RoundState.DONE and outcome.rounds_completed == 1
