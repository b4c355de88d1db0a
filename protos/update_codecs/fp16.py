"""`fp16`: IEEE binary16, 2 bytes per value (2x smaller than raw), round-to-nearest-even.

Encodes the delta d = update - global (the header's `base_sha256` names the global vector).
Error bound per value: |dec(d) - d| <= max(2^-11 * |d|, 2^-25) for |d| <= 65504 (relative
2^-11 in fp16's normal range, half the subnormal spacing 2^-24 below 2^-14). A value whose
magnitude would round beyond 65504 cannot be encoded: `encode` raises VectorError (use bf16).
"""

from __future__ import annotations

import numpy as np

from fedort.common.errors import VectorError
from fedort.protos.update_codecs.base import F32, Codec, DensePiece, StreamDecoder, check_finite, check_vector

F16 = np.dtype("<f2")
FP16_MAX = 65504.0


class Fp16Codec(Codec):
    def payload_size(self, length: int) -> int:
        return 2 * length

    def encode(self, vector: np.ndarray, rng: np.random.Generator | None = None) -> bytes:
        vector = check_vector(vector, self.spec)
        with np.errstate(over="ignore"):
            half = vector.astype(F16)
        if not np.isfinite(half).all():
            bad = int(np.flatnonzero(~np.isfinite(half))[0])
            raise VectorError(
                f"fp16 cannot represent {vector[bad]} at index {bad} (|x| must stay <= {FP16_MAX}); use bf16 or raw"
            )
        return half.tobytes()

    def _decoder(self, length: int, payload_bytes: int) -> StreamDecoder:
        return _Fp16Decoder(self.spec, length, payload_bytes)


class _Fp16Decoder(StreamDecoder):
    record = 2

    def _decode(self, view: memoryview) -> list:
        values = np.frombuffer(view, dtype=F16).astype(F32)
        check_finite(values, f"{self.spec} payload")
        return [DensePiece(self.done // 2, values)]
