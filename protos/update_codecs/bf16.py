"""`bf16`: bfloat16 (the top 16 bits of a float32), 2 bytes per value, round-to-nearest-even.

Encodes the delta d = update - global (see `VectorHeader.base_sha256`). Rounding adds
0x7FFF + (bit 16 of x) to the float32 bits and keeps the high half, which rounds to nearest and
ties to even. Error bound per value: |dec(d) - d| <= max(2^-8 * |d|, 2^-134) (8 significant bits;
float32's own exponent range, so no overflow below 3.39e38 — a value that would round to
infinity makes `encode` raise VectorError).
"""

from __future__ import annotations

import numpy as np

from fedort.common.errors import VectorError
from fedort.protos.update_codecs.base import F32, Codec, DensePiece, StreamDecoder, check_finite, check_vector

U16 = np.dtype("<u2")


def to_bf16_bits(vector: np.ndarray) -> np.ndarray:
    """The bfloat16 bit patterns (uint16) of finite float32 values, rounded to nearest even."""
    bits = vector.view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    return (rounded >> np.uint32(16)).astype(U16)


def from_bf16_bits(half: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (exact)."""
    return (half.astype(np.uint32) << np.uint32(16)).view(F32)


class Bf16Codec(Codec):
    def payload_size(self, length: int) -> int:
        return 2 * length

    def encode(self, vector: np.ndarray, rng: np.random.Generator | None = None) -> bytes:
        half = to_bf16_bits(check_vector(vector, self.spec))
        if ((half & 0x7F80) == 0x7F80).any():
            bad = int(np.flatnonzero((half & 0x7F80) == 0x7F80)[0])
            raise VectorError(f"bf16 rounds {vector[bad]} at index {bad} to infinity")
        return half.tobytes()

    def _decoder(self, length: int, payload_bytes: int) -> StreamDecoder:
        return _Bf16Decoder(self.spec, length, payload_bytes)


class _Bf16Decoder(StreamDecoder):
    record = 2

    def _decode(self, view: memoryview) -> list:
        values = from_bf16_bits(np.frombuffer(view, dtype=U16))
        check_finite(values, f"{self.spec} payload")
        return [DensePiece(self.done // 2, values)]
