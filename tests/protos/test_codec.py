"""protos/vector_stream.py: vectors as a header plus chunks, rebuilt and checked on the other end."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from fedort.protos.vector_stream import CHUNK_BYTES, VectorAssembler, VectorMeta, assemble, describe, iter_chunks, vector_digest
from fedort.common.errors import ProtocolError, ResourceExhaustedError, VectorError
from fedort.protos.messages import meta_from_pb, meta_to_pb


@pytest.fixture
def vector() -> np.ndarray:
    return np.random.default_rng(0).standard_normal(300_001).astype(np.float32)


def test_round_trip_through_chunks_is_bit_exact(vector):
    meta = describe(vector, "model", 3, chunk_size=65_536)
    chunks = list(iter_chunks(vector, 65_536))
    assert all(len(c) == 65_536 for c in chunks[:-1]) and 0 < len(chunks[-1]) <= 65_536
    np.testing.assert_array_equal(assemble(meta, chunks), vector)


def test_describe_records_length_and_sha256_of_the_raw_bytes(vector):
    meta = describe(vector, "model", 1)
    assert (meta.length, meta.dtype, meta.codec, meta.chunk_size) == (300_001, "float32", "raw", CHUNK_BYTES)
    assert meta.sha256 == hashlib.sha256(vector.tobytes()).digest() == vector_digest(vector)
    assert meta.nbytes == 4 * 300_001


def test_header_survives_protobuf(vector):
    meta = describe(vector, "model", 9, chunk_size=4096)
    assert meta_from_pb(meta_to_pb(meta)) == meta


def test_only_1d_float32_vectors_travel():
    with pytest.raises(VectorError, match="1-D float32"):
        describe(np.zeros(4, np.float64), "m", 1)
    with pytest.raises(VectorError, match="1-D float32"):
        list(iter_chunks(np.zeros((2, 2), np.float32)))


def test_sha256_mismatch_is_rejected_at_finish(vector):
    meta = describe(vector, "m", 1)
    bad = VectorMeta(meta.model_id, meta.round, meta.length, b"\0" * 32)
    with pytest.raises(VectorError, match="sha256 mismatch"):
        assemble(bad, iter_chunks(vector))


def test_short_and_long_streams_are_rejected(vector):
    meta = describe(vector, "m", 1)
    chunks = list(iter_chunks(vector))
    with pytest.raises(VectorError, match="ended after"):
        assemble(meta, chunks[:-1])
    with pytest.raises(VectorError, match="more than"):
        assemble(meta, chunks + [b"\0\0\0\0"])


def test_limits_are_checked_before_allocating():
    huge = VectorMeta("m", 1, 10**12, b"\0" * 32)
    with pytest.raises(ResourceExhaustedError, match="exceeds the limit"):
        VectorAssembler(huge, max_length=10**6)


def test_oversized_and_empty_chunks_are_rejected(vector):
    asm = VectorAssembler(describe(vector, "m", 1), max_chunk_bytes=1024)
    with pytest.raises(ResourceExhaustedError):
        asm.add(b"\0" * 1025)
    with pytest.raises(ProtocolError, match="empty chunk"):
        asm.add(b"")


@pytest.mark.parametrize("field, value, message", [
    ("dtype", "float64", "dtype"), ("codec", "zstd", "codec"), ("sha256", b"\0" * 8, "32 bytes"),
])
def test_header_fields_are_checked(vector, field, value, message):
    meta = describe(vector, "m", 1)
    fields = {**meta.__dict__, field: value}
    with pytest.raises(VectorError, match=message):
        VectorAssembler(VectorMeta(**fields))


def test_expected_length_is_enforced(vector):
    with pytest.raises(VectorError, match="must have 5 elements"):
        VectorAssembler(describe(vector, "m", 1), expected_length=5)
