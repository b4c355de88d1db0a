"""Reading one message ahead of a large upload chunk (UploadStream.chunks) changes no outcome.

The servicer posts the next message's read before it hands on a chunk larger than the stream's
receive window, so the device keeps sending while the chunk is hashed and spooled. The tests lower
that threshold below the chunk size, so every chunk is read ahead of: an update arrives bit for
bit, a malformed message after a chunk is INVALID_ARGUMENT and changes nothing, and a device that
falls silent or gives up with a read ahead pending leaves nothing behind and frees its slot.
"""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest

from chaos_support import cut_off_after_first_chunk, open_access, raw_call, round_one_open, state_snapshot
from coordinator_fixtures import (  # noqa: F401
    chunks_of, mlp_artifacts, start_coordinator, stub_client, update_header, wait_for_metric,
)
from fedort.coordinator.rpc import upload_stream
from fedort.protos.stubs import fedort_v1_pb2 as pb

CHUNK = 16384


@pytest.fixture
async def open_round(start_coordinator, stub_client, monkeypatch):
    monkeypatch.setattr(upload_stream, "UPLOAD_WINDOW_BYTES", CHUNK // 4)   # every chunk is read ahead of
    return await round_one_open(start_coordinator, stub_client, max_examples=1000, max_chunk_bytes=CHUNK,
                                round_timeout_s=240, stream_idle_timeout_s=1.0, inline_update_bytes=0,
                                **open_access())


async def test_an_update_read_ahead_of_arrives_bit_for_bit(open_round):
    coord, client, model, vector = open_round
    update = (vector * np.float32(1.5)).astype(np.float32)
    assert (await client.submit("client-a", model, 1, update, 10, chunks=chunks_of(update, CHUNK))).accepted
    assert (coord.state_dir / "spool" / "round-0001" / "client-a.f32").read_bytes() == update.tobytes()


@pytest.mark.parametrize("bad", [b"\x12\x05abc", pb.UpdatePart(header=pb.UpdateHeader()).SerializeToString()],
                         ids=["malformed", "second header"])
async def test_a_bad_message_after_a_chunk_is_invalid_argument_and_changes_nothing(open_round, bad):
    coord, client, model, vector = open_round
    before = state_snapshot(coord)
    chunks = [pb.UpdatePart(chunk=c).SerializeToString() for c in chunks_of(vector, CHUNK)]
    header = pb.UpdatePart(header=update_header("client-a", model, 1, vector, 10)).SerializeToString()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await raw_call(client.channel, "SubmitUpdate")(iter([header, chunks[0], bad, *chunks[1:]]), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert state_snapshot(coord) == before
    assert (await client.submit("client-a", model, 1, vector, 10, chunks=chunks_of(vector, CHUNK))).accepted


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_a_device_silent_after_a_chunk_is_dropped_and_frees_its_slot(open_round, stub_client):
    coord, client, model, vector = open_round
    before = state_snapshot(coord)
    peer = stub_client(coord.port)
    call = peer.stub.SubmitUpdate()   # no deadline: the server's idle limit must end it
    await call.write(pb.UpdatePart(header=update_header("client-a", model, 1, vector, 10)))
    await call.write(pb.UpdatePart(chunk=chunks_of(vector, CHUNK)[0]))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(call, 20)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "stalled" in err.value.details()
    await wait_for_metric(coord, "fedort_upload_slots_in_use", lambda v: v == 0)
    assert state_snapshot(coord) == before
    assert (await client.submit("client-a", model, 1, vector, 10, chunks=chunks_of(vector, CHUNK))).accepted


async def test_a_device_that_gives_up_after_a_chunk_leaves_nothing(open_round):
    coord, client, model, vector = open_round
    before = state_snapshot(coord)
    await cut_off_after_first_chunk(coord, client, model, vector, CHUNK)
    assert state_snapshot(coord) == before
    assert (await client.submit("client-a", model, 1, vector, 10, chunks=chunks_of(vector, CHUNK))).accepted
