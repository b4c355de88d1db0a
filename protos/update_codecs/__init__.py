"""Update codecs, shared by the device (encode) and the coordinator (streaming decode).

    codec = get_codec("zstd+int8")                   # spec grammar: spec.py
    payload = codec.encode(delta, rng)               # bytes
    meta = describe_payload(payload, model_id=..., round=..., length=P, codec="zstd+int8",
                            base_sha256=global_digest)
    dec = VectorDecoder(meta, expected_length=P)     # receiver: pieces per chunk, digest at finish()

| codec | encodes | bytes for P values | error bound per value (d = the encoded vector) |
| --- | --- | --- | --- |
| raw | the vector | 4P | 0 |
| fp16 | delta | 2P | max(2^-11 |d|, 2^-25), |d| <= 65504 |
| bf16 | delta | 2P | max(2^-8 |d|, 2^-134) |
| int8[:B] | delta | P + 4 ceil(P/B) | < max_block|d| / 127 (1 + 2^-22); unbiased (stochastic rounding) |
| topk:F | delta | 8 ceil(F P) | exact on the kept k, 0 elsewhere; ||err||^2 <= (1 - k/P) ||d||^2 |
| zstd+X | as X | zstd of X's payload | as X (lossless wrapper) |

"delta" = update - global, named by `VectorHeader.base_sha256`; the receiver adds the global back.
"""

from fedort.protos.update_codecs.base import Codec, DensePiece, Piece, SparsePiece, StreamDecoder
from fedort.protos.update_codecs.registry import REGISTRY, get_codec
from fedort.protos.update_codecs.spec import CodecSpec, allows, parse_codec
from fedort.protos.update_codecs.stream import (
    VectorDecoder,
    accumulate_stream,
    decode_stream,
    describe_payload,
    iter_payload_chunks,
)

__all__ = [
    "Codec",
    "CodecSpec",
    "DensePiece",
    "Piece",
    "REGISTRY",
    "SparsePiece",
    "StreamDecoder",
    "VectorDecoder",
    "accumulate_stream",
    "allows",
    "decode_stream",
    "describe_payload",
    "get_codec",
    "iter_payload_chunks",
    "parse_codec",
]
