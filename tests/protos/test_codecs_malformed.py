"""protos/codecs: malformed payloads raise VectorError (INVALID_ARGUMENT) saying what is wrong."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import zstandard

from fedort.protos.vector_stream import VectorAssembler, describe
from fedort.protos.update_codecs import VectorDecoder, describe_payload, get_codec, iter_payload_chunks, parse_codec
from fedort.common.errors import ProtocolError, ResourceExhaustedError, VectorError
from fedort.protos.status_codes import status_for

P = 10_000


@pytest.fixture(scope="module")
def vector() -> np.ndarray:
    return np.random.default_rng(5).standard_normal(P).astype(np.float32)


def decode(spec: str, payload: bytes, length: int = P, chunk: int = 1000) -> None:
    dec = get_codec(spec).decoder(length, len(payload))
    for c in iter_payload_chunks(payload, chunk):
        dec.feed(c)
    dec.finish()


def topk_payload(indices, values=None) -> bytes:
    recs = np.empty(len(indices), dtype=[("i", "<u4"), ("v", "<f4")])
    recs["i"] = indices
    recs["v"] = 1.0 if values is None else values
    return recs.tobytes()


def test_vector_error_maps_to_invalid_argument():
    assert status_for(VectorError("bad payload"))[0].name == "INVALID_ARGUMENT"


def test_topk_index_out_of_range():
    with pytest.raises(VectorError, match=r"pair 1 has index 100, out of range for a vector of 100 values"):
        decode("topk:0.02", topk_payload([3, 100]), length=100)


@pytest.mark.parametrize("indices,match", [([5, 5], "index 5 after 5"), ([7, 2], "index 2 after 7")])
def test_topk_indices_must_increase(indices, match):
    with pytest.raises(VectorError, match=match + "; indices must be strictly increasing"):
        decode("topk:0.02", topk_payload(indices), length=100)


def test_topk_indices_must_increase_across_chunk_boundaries():
    payload = topk_payload([10, 20, 15, 30])
    with pytest.raises(VectorError, match="pair 2 has index 15 after 20"):
        decode("topk:0.04", payload, length=100, chunk=12)   # the bad pair straddles two chunks


def test_topk_non_finite_value():
    with pytest.raises(VectorError, match="non-finite value"):
        decode("topk:0.02", topk_payload([1, 2], [1.0, np.nan]), length=100)


@pytest.mark.parametrize("spec", ["raw", "fp16", "int8", "topk:0.01"])
def test_truncated_payload_is_refused_at_finish(spec, vector):
    payload = get_codec(spec).encode(vector)
    dec = get_codec(spec).decoder(P)
    dec.feed(payload[:-3])
    with pytest.raises(VectorError, match=f"must be {len(payload)} bytes; the stream ended after {len(payload) - 3}"):
        dec.finish()


@pytest.mark.parametrize("spec", ["raw", "bf16", "int8", "topk:0.01"])
def test_oversized_payload_is_refused_on_the_chunk_that_overflows(spec, vector):
    payload = get_codec(spec).encode(vector)
    dec = get_codec(spec).decoder(P)
    dec.feed(payload)
    with pytest.raises(VectorError, match=f"must be {len(payload)} bytes; received at least {len(payload) + 1}"):
        dec.feed(b"\0")


def test_header_payload_size_must_match_the_codec_layout():
    # topk:0.01 of 10 000 values is exactly 100 pairs = 800 bytes: "wrong counts" are refused up front
    with pytest.raises(VectorError, match="topk:0.01 payload for 10000 values must be 800 bytes, header says 808"):
        get_codec("topk:0.01").decoder(P, 808)


TOO_LARGE = r"scale 9\.99\d*e\+37; scales must be finite, >= 0 and <= 2\.679e\+36"


@pytest.mark.parametrize("scale,match", [(np.nan, "scale nan"), (np.inf, "scale inf"), (-1.0, "scale -1.0"),
                                         (1e38, TOO_LARGE)])
def test_int8_bad_scale(scale, match, vector):
    payload = bytearray(get_codec("int8").encode(vector))
    payload[260:264] = np.float32(scale).tobytes()   # block 1's scale
    with pytest.raises(VectorError, match=f"block 1 has {match}"):
        decode("int8", bytes(payload))


@pytest.mark.parametrize("spec,bad", [("raw", np.float32(np.inf).tobytes()), ("fp16", np.float16(np.nan).tobytes()),
                                      ("bf16", b"\x80\x7f")])
def test_non_finite_values_are_refused(spec, bad, vector):
    payload = bytearray(get_codec(spec).encode(vector))
    payload[8:8 + len(bad)] = bad
    with pytest.raises(VectorError, match="non-finite value"):
        decode(spec, bytes(payload))


def test_truncated_zstd_frame(vector):
    payload = get_codec("zstd+int8").encode(vector)
    with pytest.raises(VectorError, match="truncated or corrupt zstd frame"):
        decode("zstd+int8", payload[:-5])


def test_corrupt_zstd_frame(vector):
    payload = bytearray(get_codec("zstd+int8").encode(vector))
    for i in range(40, len(payload) - 8, 97):
        payload[i] ^= 0x5A
    with pytest.raises(VectorError, match="zstd frame"):
        decode("zstd+int8", bytes(payload))


def test_bytes_after_the_zstd_frame(vector):
    payload = get_codec("zstd+int8").encode(vector) + b"extra"
    with pytest.raises(VectorError, match="5 bytes after the end of its zstd frame"):
        decode("zstd+int8", payload, chunk=len(payload))


def test_zstd_frame_must_declare_the_inner_payload_size(vector):
    inner = get_codec("int8").encode(vector)
    short = zstandard.ZstdCompressor().compress(inner[:-260])
    with pytest.raises(VectorError, match=f"must declare {len(inner)} bytes of content for {P} values, it declares"):
        decode("zstd+int8", short)
    unsized = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    frame = unsized.compress(inner) + unsized.flush()
    with pytest.raises(VectorError, match="it declares no size"):
        decode("zstd+int8", frame)


def test_a_zstd_header_without_payload_size(vector):
    payload = get_codec("zstd+int8").encode(vector)
    meta = describe_payload(payload, model_id="m", round=1, length=P, codec="zstd+int8")
    with pytest.raises(VectorError, match="zstd\\+int8 payloads vary in size: the header must give payload_bytes"):
        VectorDecoder(dataclasses.replace(meta, payload_bytes=0))


def test_not_a_zstd_frame():
    with pytest.raises(VectorError, match="does not start with a zstd frame header"):
        decode("zstd+raw", b"definitely not zstd at all")


@pytest.mark.parametrize("text,match", [("gzip", "unknown codec 'gzip'"), ("topk", "topk needs a fraction"),
                                        ("topk:0", r"fraction must be in \(0, 1\]"), ("topk:x", "must be a number"),
                                        ("int8:7", r"block size must be an integer in \[16, 65536\]"),
                                        ("fp16:2", "fp16 takes no parameter"), ("", "non-empty string")])
def test_bad_codec_specs(text, match):
    with pytest.raises(VectorError, match=match):
        parse_codec(text)


def test_stream_digest_mismatch(vector):
    payload = get_codec("fp16").encode(vector)
    meta = describe_payload(payload, model_id="m", round=1, length=P, codec="fp16")
    tampered = bytearray(payload)
    tampered[0] ^= 1
    dec = VectorDecoder(meta)
    for c in iter_payload_chunks(bytes(tampered)):
        dec.feed(c)
    with pytest.raises(VectorError, match="payload sha256 mismatch"):
        dec.finish()


def test_stream_header_checks(vector):
    payload = get_codec("int8").encode(vector)
    meta = describe_payload(payload, model_id="m", round=1, length=P, codec="int8")
    with pytest.raises(VectorError, match="must have 9 elements for this model, header says 10000"):
        VectorDecoder(meta, expected_length=9)
    with pytest.raises(ResourceExhaustedError, match="exceeds the limit of 100"):
        VectorDecoder(meta, max_length=100)
    with pytest.raises(VectorError, match="unknown codec 'lz4'"):
        VectorDecoder(dataclasses.replace(meta, codec="lz4"))
    with pytest.raises(VectorError, match="base_sha256 must be empty or 32 bytes"):
        VectorDecoder(dataclasses.replace(meta, base_sha256=b"xx"))
    delta = dataclasses.replace(meta, base_sha256=b"\1" * 32)
    with pytest.raises(VectorError, match="delta against vector 0101010101010101…, but this round's global vector "
                                          "is 0202020202020202…"):
        VectorDecoder(delta, base_sha256=b"\2" * 32)
    assert VectorDecoder(delta, base_sha256=b"\1" * 32).delta
    with pytest.raises(VectorError, match="int8 payload for 10000 values must be 10160 bytes, header says 10161"):
        VectorDecoder(dataclasses.replace(meta, payload_bytes=10161))
    dec = VectorDecoder(meta, max_chunk_bytes=64)
    with pytest.raises(ProtocolError, match="empty chunk"):
        dec.feed(b"")
    with pytest.raises(ResourceExhaustedError, match="chunk of 65 bytes exceeds the limit of 64"):
        dec.feed(payload[:65])


def test_the_raw_assembler_refuses_deltas_and_wrong_payload_sizes(vector):
    meta = describe(vector, "m", 1)
    with pytest.raises(VectorError, match="takes whole vectors; the header announces a delta"):
        VectorAssembler(dataclasses.replace(meta, base_sha256=b"\1" * 32))
    with pytest.raises(VectorError, match="a raw vector of 10000 values is 40000 bytes, header says payload_bytes=8"):
        VectorAssembler(dataclasses.replace(meta, payload_bytes=8))
    assert VectorAssembler(dataclasses.replace(meta, payload_bytes=40000)).meta.payload_bytes == 40000
