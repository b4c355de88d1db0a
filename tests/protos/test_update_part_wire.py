"""An upload's chunk messages read without protobuf (protos.update_part): same payload as protobuf, or protobuf decides.

The fast path takes only a plain `UpdatePart{chunk}` (tag, minimal varint length, exactly that many
bytes); everything else goes to `UpdatePart.FromString`. Over real gRPC, malformed chunk messages
after a valid header are INVALID_ARGUMENT and change nothing, and an update sent in a form only
protobuf reads (an over-long length varint) spools the same bytes as the plain form.
"""

from __future__ import annotations

import os

import grpc
import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos_support import open_access, raw_call, state_snapshot
from coordinator_fixtures import (  # noqa: F401
    chunks_of, mlp_artifacts, start_coordinator, stub_client, update_header,
)
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.update_part import (chunk_message, chunk_view, parse_update_part, parse_vector_part, part_kind,
                                      serialize_part)

INVALID = grpc.StatusCode.INVALID_ARGUMENT
CHUNK = 16384


def protobuf_chunk(data: bytes) -> bytes | None:
    """What protobuf makes of `data`: the chunk it holds, None if it holds no chunk or does not parse."""
    try:
        part = pb.UpdatePart.FromString(data)
    except DecodeError:
        return None
    return part.chunk if part.WhichOneof("part") == "chunk" else None


def overlong(n: int, extra: int) -> bytes:
    """The varint of `n` padded with `extra` continuation bytes (valid protobuf, not minimal)."""
    out = bytearray()
    while True:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
        if n == 0:
            break
    out += b"\x80" * extra
    out[-1] &= 0x7F
    return bytes(out)


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, 1 << 20])
def test_a_plain_chunk_message_is_sliced_to_the_payload_protobuf_parses(size):
    payload = os.urandom(size)
    data = pb.UpdatePart(chunk=payload).SerializeToString()
    view = chunk_view(data)
    assert isinstance(view, memoryview) and view.readonly
    assert bytes(view) == payload == protobuf_chunk(data)
    assert part_kind(parse_update_part(data)) == "chunk"


CASES = {
    "header": pb.UpdatePart(header=pb.UpdateHeader(client_id="c")).SerializeToString(),
    "two chunk fields (protobuf keeps the last)": b"\x12\x02ab\x12\x01c",
    "chunk then an unknown field": b"\x12\x02ab\x18\x01",
    "over-long length varint": b"\x12" + overlong(3, 2) + b"abc",
    "length past the end": b"\x12\x05abc",
    "length short of the end": b"\x12\x02abc",
    "varint cut off": b"\x12\x80",
    "tag alone": b"\x12",
    "empty message": b"",
    "garbage": b"\xff\xff\xff",
}


@pytest.mark.parametrize("data", CASES.values(), ids=CASES.keys())
def test_anything_but_a_plain_chunk_goes_to_protobuf(data):
    assert chunk_view(data) is None
    try:
        expected = pb.UpdatePart.FromString(data)
    except DecodeError:
        with pytest.raises(DecodeError):
            parse_update_part(data)
        return
    assert parse_update_part(data) == expected


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=40), st.integers(min_value=0, max_value=6), st.integers(min_value=-3, max_value=3))
def test_the_fast_path_never_disagrees_with_protobuf(payload, pad, skew):
    """Random chunk messages, with padded varints and wrong lengths: whenever the fast path answers, protobuf
    reads the same payload from the same bytes."""
    n = max(0, len(payload) + skew)
    for data in (b"\x12" + overlong(n, pad) + payload, b"\x12" + overlong(len(payload), 0) + payload, payload):
        view = chunk_view(data)
        if view is not None:
            assert protobuf_chunk(data) == bytes(view)


@pytest.fixture
async def open_round(start_coordinator, stub_client):
    coord = await start_coordinator(max_examples=1000, max_chunk_bytes=CHUNK, round_timeout_s=240,
                                    inline_update_bytes=0, **open_access())
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    assert (await client.poll("client-a", model)).kind == pb.Task.FIT
    assert (await client.poll("client-b", model)).kind == pb.Task.FIT
    _, vector = await client.download_vector("client-a", model, 1)
    return coord, client, model, vector


async def rejected(call) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == INVALID, (err.value.code(), err.value.details())
    return err.value.details()


MALFORMED = {
    "length past the end": b"\x12\x05abc",
    "varint cut off": b"\x12\x80",
    "invalid wire type after a chunk": b"\x12\x01a\xff\xff",
}


@pytest.mark.slow
@pytest.mark.parametrize("bad", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_chunk_message_is_invalid_argument_and_changes_nothing(open_round, bad):
    coord, client, model, vector = open_round
    before = state_snapshot(coord)
    header = pb.UpdatePart(header=update_header("client-a", model, 1, vector, 10)).SerializeToString()
    good = [pb.UpdatePart(chunk=c).SerializeToString() for c in chunks_of(vector, CHUNK)]
    message = await rejected(raw_call(client.channel, "SubmitUpdate")(iter([header, good[0], bad, *good[1:]]),
                                                                      timeout=10))
    assert "not a valid protobuf message" in message
    assert state_snapshot(coord) == before
    reply = await client.submit("client-a", model, 1, vector, 10, chunks=chunks_of(vector, CHUNK))
    assert reply.accepted and not reply.duplicate


@pytest.mark.slow
async def test_an_update_only_protobuf_reads_spools_the_same_bytes_as_the_plain_form(open_round):
    coord, client, model, vector = open_round
    update = (vector + np.float32(0.25)).astype(np.float32)
    header = update_header("client-a", model, 1, update, 10)
    padded = [b"\x12" + overlong(len(c), 1) + c for c in chunks_of(update, CHUNK)]   # protobuf path
    assert all(chunk_view(p) is None for p in padded)
    parts = [pb.UpdatePart(header=header).SerializeToString(), *padded]
    reply = await raw_call(client.channel, "SubmitUpdate")(iter(parts), timeout=10)
    assert pb.SubmitReply.FromString(reply).accepted
    assert (await client.submit("client-b", model, 1, update, 10, chunks=chunks_of(update, CHUNK))).accepted   # fast path
    spool = coord.state_dir / "spool" / "round-0001"
    assert (spool / "client-a.f32").read_bytes() == (spool / "client-b.f32").read_bytes() == update.tobytes()


def test_a_device_reads_a_download_chunk_as_the_payload_and_anything_else_through_protobuf():
    payload = os.urandom(CHUNK)
    chunk = parse_vector_part(pb.VectorPart(chunk=payload).SerializeToString())
    assert isinstance(chunk, memoryview) and bytes(chunk) == payload
    header = parse_vector_part(pb.VectorPart(header=pb.VectorHeader(length=3, sha256=b"\1" * 32)).SerializeToString())
    assert part_kind(header) == "header" and header.header.length == 3
    with pytest.raises(DecodeError):
        parse_vector_part(b"\x12\x05ab")   # a length beyond the message: protobuf refuses it


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, (1 << 20) + 3])
def test_the_coordinator_s_chunk_message_is_what_protobuf_serializes(size):
    payload = os.urandom(size)
    assert chunk_message(memoryview(payload)) == pb.VectorPart(chunk=payload).SerializeToString()
    assert serialize_part(chunk_message(payload)) == chunk_message(payload)
    header = pb.VectorPart(header=pb.VectorHeader(length=3))
    assert serialize_part(header) == header.SerializeToString()
