"""protos/codecs: decoding in arbitrary chunks equals one-shot decoding; headers carry what travels."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from fedort.protos.update_codecs import (SparsePiece, VectorDecoder, accumulate_stream, decode_stream, describe_payload,
                                  get_codec, iter_payload_chunks)
from fedort.protos.messages import meta_from_pb, meta_to_pb

SPECS = ["raw", "fp16", "bf16", "int8", "int8:1024", "topk:0.01", "zstd+raw", "zstd+int8", "zstd+topk:0.05"]
P = 50_021


@pytest.fixture(scope="module")
def vector() -> np.ndarray:
    return np.random.default_rng(3).standard_normal(P).astype(np.float32)


def random_chunks(payload: bytes, rng: np.random.Generator) -> list[bytes]:
    """The payload cut at random places (chunks of 1 byte up to ~1/5 of it)."""
    cuts = np.sort(rng.choice(np.arange(1, len(payload)), size=min(len(payload) - 1, 40), replace=False))
    return [payload[a:b] for a, b in zip([0, *cuts], [*cuts, len(payload)])]


@pytest.mark.parametrize("spec", SPECS)
def test_random_chunk_boundaries_decode_like_one_shot(spec, vector):
    codec = get_codec(spec)
    payload = codec.encode(vector, np.random.default_rng(0))
    whole = codec.decode(payload, P)
    for seed in range(3):
        out = np.zeros(P, dtype=np.float32)
        dec = codec.decoder(P, len(payload))
        for chunk in random_chunks(payload, np.random.default_rng(seed)):
            for piece in dec.feed(chunk):
                piece.write_to(out)
        for piece in dec.finish():
            piece.write_to(out)
        np.testing.assert_array_equal(out, whole)


@pytest.mark.parametrize("spec", SPECS)
def test_accumulate_adds_weight_times_the_decoded_vector_in_float64(spec, vector):
    codec = get_codec(spec)
    payload = codec.encode(vector, np.random.default_rng(0))
    meta = describe_payload(payload, model_id="m", round=2, length=P, codec=spec, chunk_size=4096)
    acc = np.full(P, 0.5, dtype=np.float64)
    accumulate_stream(meta, iter_payload_chunks(payload, 4096), acc, weight=3.0)
    expected = 0.5 + 3.0 * codec.decode(payload, P).astype(np.float64)
    np.testing.assert_allclose(acc, expected, rtol=0, atol=1e-12)


def test_topk_decodes_to_sparse_pieces_holding_only_the_kept_values(vector):
    codec = get_codec("topk:0.01")
    payload = codec.encode(vector)
    dec = codec.decoder(P, len(payload))
    pieces = [p for c in iter_payload_chunks(payload, 1000) for p in dec.feed(c)] + dec.finish()
    assert all(isinstance(p, SparsePiece) for p in pieces)
    assert sum(len(p.values) for p in pieces) == len(payload) // 8 == 501


def test_header_sha256_covers_the_encoded_payload_and_survives_protobuf(vector):
    payload = get_codec("zstd+int8").encode(vector)
    base = hashlib.sha256(b"global").digest()
    meta = describe_payload(payload, model_id="m", round=4, length=P, codec="zstd+int8:256", base_sha256=base)
    assert meta.sha256 == hashlib.sha256(payload).digest()
    assert (meta.codec, meta.payload_bytes, meta.delta) == ("zstd+int8", len(payload), True)
    assert meta_from_pb(meta_to_pb(meta)) == meta


def test_decode_stream_checks_the_digest_and_returns_the_vector(vector):
    payload = get_codec("bf16").encode(vector)
    meta = describe_payload(payload, model_id="m", round=1, length=P, codec="bf16")
    y = decode_stream(meta, iter_payload_chunks(payload, 7777), expected_length=P)
    np.testing.assert_array_equal(y, get_codec("bf16").decode(payload, P))
    assert not meta.delta and VectorDecoder(meta).delta is False
