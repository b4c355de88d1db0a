"""An upload's chunk messages read without protobuf: the payload is sliced out of the received bytes.

After its header, an update stream is `UpdatePart{chunk}` messages of ~1 MiB. On the wire each is
the tag 0x12 (field 2, length-delimited), the payload's length as a varint, then the payload:

    12 | 80 80 40 | <1,048,576 payload bytes>

`parse_update_part` (the coordinator's request deserializer for SubmitUpdate) returns a read-only
memoryview of the payload for exactly that shape (minimal varint of at most 5 bytes, length equal
to what follows), which saves protobuf's parse and the `.chunk` copy per message. Any other bytes
(the header, a repeated field, unknown fields, an over-long varint, garbage) go to
`UpdatePart.FromString`, so protobuf decides everything but the plain chunk and both paths give
the same payload for it (tests/protos/test_update_part_wire.py). A device reads DownloadVector's
`VectorPart{chunk}` messages the same way (`parse_vector_part`), and the coordinator writes them
without protobuf (`chunk_message`, sent through `serialize_part`).
"""

from __future__ import annotations

from fedort.protos.stubs import fedort_v1_pb2 as pb

CHUNK_TAG = 0x12  # (field 2 << 3) | wire type 2
_MAX_VARINT = 5  # lengths below 2^35: far above any message gRPC lets through


def chunk_view(data: bytes) -> memoryview | None:
    """The payload of `data` if it is one plain UpdatePart.chunk field (see the module docstring), else None."""
    end = len(data)
    if end < 2 or data[0] != CHUNK_TAG:
        return None
    n = shift = 0
    i = 1
    while True:
        if i >= end or i > _MAX_VARINT:
            return None
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    if (b == 0 and i > 2) or n != end - i:  # an over-long varint, or more or fewer bytes than it says
        return None
    return memoryview(data)[i:]


def chunk_message(payload: bytes | memoryview) -> bytes:
    """The wire bytes of `VectorPart{chunk: payload}` (= `UpdatePart{chunk}`): tag, minimal varint length,
    payload, built with one copy of the payload instead of protobuf's three (slice, field, serialization)."""
    n = len(payload)
    head = bytearray([CHUNK_TAG])
    while n >= 0x80:
        head.append((n & 0x7F) | 0x80)
        n >>= 7
    head.append(n)
    return b"".join((head, payload))


def serialize_part(part: pb.VectorPart | bytes) -> bytes:
    """The coordinator's response serializer for DownloadVector: a message is serialized by protobuf, bytes (a
    `chunk_message`) are already the wire form."""
    return part if isinstance(part, bytes) else part.SerializeToString()


def parse_update_part(data: bytes) -> pb.UpdatePart | memoryview:
    """A chunk's payload as a memoryview (the fast path), else the parsed UpdatePart (protobuf raises DecodeError)."""
    view = chunk_view(data)
    return view if view is not None else pb.UpdatePart.FromString(data)


def parse_vector_part(data: bytes) -> pb.VectorPart | memoryview:
    """The device's response deserializer for DownloadVector: VectorPart has the same layout (header = field 1,
    chunk = field 2), so a plain chunk is a memoryview of its payload and anything else is parsed by protobuf."""
    view = chunk_view(data)
    return view if view is not None else pb.VectorPart.FromString(data)


def part_kind(part: pb.UpdatePart | pb.VectorPart | memoryview) -> str | None:
    """Which of UpdatePart's oneof a parsed part holds: "header", "chunk" or None."""
    return "chunk" if isinstance(part, memoryview) else part.WhichOneof("part")
