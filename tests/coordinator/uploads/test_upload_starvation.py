"""Issue 13 (1): hostile uploads that send a header, then trickle or go silent, cannot starve honest devices.

Upload slots are bounded per client, waiting for one is bounded, a whole upload must arrive at a
minimum rate, and the close of the round an upload targets frees its slot.
"""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest

from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.common.round_state import RoundState

from coordinator_fixtures import (RPC_TIMEOUT, mlp_artifacts, start_coordinator, stub_client,  # noqa: F401
                                  update_header)

HONEST = ("honest-a", "honest-b")
HOSTILE = tuple(f"hostile-{i}" for i in range(4))
CLIENT_RACE = "client-side race"


async def _wait_for(predicate, timeout: float, what: str) -> None:
    """Until `predicate()` holds (checked on every loop turn), or fail naming `what`."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout
    while not predicate():
        assert loop.time() < until, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def _hostile(client, cid: str, model: str, vector: np.ndarray, trickle: bool) -> grpc.StatusCode:
    """Open an upload, send its header, then one byte now and then (or nothing); the status it ends with.

    A trickling client may see INTERNAL "Internal error from Core" instead of the server's status
    when the server ends the call while it writes (the grpc-aio race coordinator_fixtures
    describes); that is reported as CLIENT_RACE.
    """
    call = client.stub.SubmitUpdate(timeout=120)
    try:
        await call.write(pb.UpdatePart(header=update_header(cid, model, 1, vector, 10)))
        while trickle:
            await call.write(pb.UpdatePart(chunk=b"\0"))
            await asyncio.sleep(0.5)      # the attacker's pace, not synchronisation
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
        pass
    code = await call.code()
    if code == grpc.StatusCode.INTERNAL and "from Core" in (await call.details() or ""):
        return CLIENT_RACE
    return code


async def _honest(client, cid: str, model: str) -> pb.SubmitReply:
    """Poll, download, submit; on UNAVAILABLE retry as a device does (bounded)."""
    task = await client.poll(cid, model)
    _, g = await client.download_vector(cid, model, task.round)
    for _ in range(20):
        try:
            return await client.submit(cid, model, task.round, (g + np.float32(0.5)).astype(np.float32), 10)
        except grpc.aio.AioRpcError as e:
            if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
                raise
            await asyncio.sleep(0.2)      # the device's backoff
    raise AssertionError(f"{cid} never got its update in")


async def _join_all(client):
    model = (await client.join(HONEST[0])).model_id
    for cid in HONEST[1:] + HOSTILE:
        await client.join(cid)
    for cid in HOSTILE:
        assert (await client.poll(cid, model)).kind == pb.Task.FIT
    _, g = await client.download_vector(HOSTILE[0], model, 1)
    return model, g


@pytest.mark.slow
async def test_twenty_hostile_uploads_beside_two_honest_devices_the_round_completes(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=1, min_clients=2, min_available_clients=6, round_timeout_s=8, max_round_attempts=1,
                                     max_concurrent_uploads=4, upload_grace_s=1.0, stream_idle_timeout_s=120)
    client = stub_client(coord.port)
    model, g = await _join_all(client)
    slots = coord.engine.uploads.slots
    hostile = [asyncio.create_task(_hostile(client, cid, model, g, trickle=i % 2 == 0))
               for cid in HOSTILE for i in range(5)]                       # 20 uploads from 4 selected devices
    await _wait_for(lambda: slots.in_use == 4, 10, "the hostile uploads to hold every slot")
    replies = await asyncio.wait_for(asyncio.gather(*(_honest(client, cid, model) for cid in HONEST)), 30)
    assert all(r.accepted for r in replies)
    outcome = await asyncio.wait_for(coord.wait_done(), 30)
    assert outcome.state is RoundState.DONE
    codes = await asyncio.wait_for(asyncio.gather(*hostile), 30)
    assert set(codes) <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                          grpc.StatusCode.FAILED_PRECONDITION, CLIENT_RACE}
    assert codes.count(grpc.StatusCode.UNAVAILABLE) >= 16      # over their share: refused at once
    rounds = coord.engine.store.submissions(1)
    assert sorted(s.client_id for s in rounds) == sorted(HONEST)


@pytest.mark.slow
async def test_an_upload_waiting_too_long_for_a_slot_is_refused_unavailable(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=1, min_clients=2, min_available_clients=6, max_concurrent_uploads=1, upload_slot_wait_s=0.3,
                                    upload_min_rate_bytes_s=1.0, upload_grace_s=60, stream_idle_timeout_s=120)
    client = stub_client(coord.port)
    model, g = await _join_all(client)
    held = asyncio.create_task(_hostile(client, HOSTILE[0], model, g, trickle=False))
    await _wait_for(lambda: coord.engine.uploads.slots.in_use == 1, 10, "the hostile upload to hold the slot")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit(HONEST[0], model, 1, g, 10)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE and "upload slots stayed busy" in e.value.details()
    held.cancel()


@pytest.mark.slow
async def test_uploads_still_receiving_when_their_round_closes_are_cut_short(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=1, min_clients=2, min_available_clients=6, round_timeout_s=2, max_round_attempts=1,
                                    upload_min_rate_bytes_s=1.0, upload_grace_s=60, stream_idle_timeout_s=120)
    client = stub_client(coord.port)
    model, g = await _join_all(client)
    hostile = [asyncio.create_task(_hostile(client, cid, model, g, trickle=False)) for cid in HOSTILE]
    await _wait_for(lambda: coord.engine.uploads.slots.in_use == 4, 10, "the hostile uploads to start")
    codes = await asyncio.wait_for(asyncio.gather(*hostile), 20)     # the round's deadline ends them
    assert codes == [grpc.StatusCode.FAILED_PRECONDITION] * 4
    assert coord.engine.uploads.slots.in_use == 0
