"""The `raw` codec: the payload is the P values as little-endian float32, decoded without a copy.

    v = frombuffer(payload, '<f4'),  |payload| = 4·P bytes
"""

from __future__ import annotations

import numpy as np

from fedort.coordinator.aggregation.decode import Decoder, register_decoder
from fedort.protos.errors import VectorError


class RawDecoder(Decoder):
    codec = "raw"

    def decode(self, payload: np.ndarray, length: int) -> np.ndarray:
        if payload.dtype == np.float32 and payload.shape == (length,):
            return payload       # the received vector itself
        raw = np.ascontiguousarray(payload).view(np.uint8).reshape(-1)
        if raw.nbytes != 4 * length:
            raise VectorError(f"raw update holds {raw.nbytes} bytes, expected {4 * length} (float32 × {length})")
        return raw.view("<f4")


register_decoder(RawDecoder())
