"""The `secagg-u64` codec: a MASKED update of secure aggregation, P + 1 little-endian uint64 in Z_{2^b}.

    y = frombuffer(payload, '<u8'),  |payload| = 8·(P + 1) bytes   (P masked values, then the masked weight)

Not float values: a masked vector is uniform noise on its own, so it is never dequantized. Only
`secure_sum.SecureSum` consumes it (it sums the masked vectors mod 2^b and decodes the unmasked
SUM); `float_payload = False` tells the upload path not to check finiteness on its bytes.
"""

from __future__ import annotations

import numpy as np

from fedort.coordinator.aggregation.decode import Decoder, register_decoder
from fedort.protos.errors import VectorError
from fedort.protos.secagg.task import SECAGG_CODEC, payload_words


class SecAggDecoder(Decoder):
    codec = SECAGG_CODEC
    float_payload = False

    def payload_words(self, length: int) -> int:
        return payload_words(length)

    def decode(self, payload: np.ndarray, length: int) -> np.ndarray:
        """The masked uint64 vector of length P + 1 (a view of the payload)."""
        raw = np.ascontiguousarray(payload).view(np.uint8).reshape(-1)
        if raw.nbytes != 8 * (length + 1):
            raise VectorError(f"secagg-u64 update holds {raw.nbytes} bytes, expected {8 * (length + 1)} "
                              f"(uint64 × {length + 1})")
        return raw.view("<u8")

    def blocks(self, payload: np.ndarray, length: int, block: int = 0):
        raise VectorError("a secagg-u64 update is masked: only the secure-sum combiner reads it, whole")


register_decoder(SecAggDecoder())
