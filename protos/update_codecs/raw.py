"""`raw`: the vector's little-endian float32 bytes, 4 bytes per value. Lossless (error 0).

The only codec that sends the vector itself rather than the delta from the global vector, and
the default: a header without a codec, or with `raw`, means exactly the format fedort always used.
"""

from __future__ import annotations

import numpy as np

from fedort.protos.update_codecs.base import F32, Codec, DensePiece, StreamDecoder, check_finite, check_vector


class RawCodec(Codec):
    def payload_size(self, length: int) -> int:
        return 4 * length

    def encode(self, vector: np.ndarray, rng: np.random.Generator | None = None) -> bytes:
        return check_vector(vector, self.spec).tobytes()

    def _decoder(self, length: int, payload_bytes: int) -> StreamDecoder:
        return _RawDecoder(self.spec, length, payload_bytes)


class _RawDecoder(StreamDecoder):
    record = 4

    def _decode(self, view: memoryview) -> list:
        values = np.frombuffer(view, dtype=F32)
        check_finite(values, f"{self.spec} payload")
        return [DensePiece(self.done // 4, values)]
