"""The `secagg-u64` codec: a MASKED update of secure aggregation, P + 1 little-endian uint64 in Z_{2^b}.

    y = frombuffer(payload, '<u8'),  payload_bytes = 8·(P + 1)   (P masked values, then the masked weight)

Not float values: a masked vector is uniform noise on its own, so it is never dequantized nor
checked for finiteness (its stream validation only counts bytes; the receiver checks the sha256).
Only a combiner that `folds_words` (`secure_sum.SecureSum`) consumes it: it sums the masked words
mod 2^b and decodes the unmasked SUM; `decode` therefore returns the uint64 words, not floats.
"""

from __future__ import annotations

import numpy as np

from fedort.coordinator.aggregation.decode import Decoder, register_decoder
from fedort.protos.errors import VectorError
from fedort.protos.secagg.task import SECAGG_CODEC, payload_words


class _CountingStream:
    """Stream 'validation' of a masked payload: any bytes are a valid word; the size is checked upstream."""

    def feed(self, chunk: bytes | memoryview) -> list:
        return []

    def finish(self) -> list:
        return []


class SecAggDecoder(Decoder):
    codec = SECAGG_CODEC
    streams = True           # nothing to decode while spooling: no float finiteness check on masked words

    def payload_bytes(self, length: int, declared: int) -> int:
        expected = 4 * payload_words(length)
        if declared not in (0, expected):
            raise VectorError(f"{self.codec} payload for {length} values must be {expected} bytes "
                              f"(uint64 × {length + 1}), header says {declared}")
        return expected

    def stream(self, length: int, payload_bytes: int) -> _CountingStream:
        return _CountingStream()

    def decode(self, payload: np.ndarray, length: int) -> np.ndarray:
        """The masked uint64 vector of length P + 1 (a view of the payload)."""
        raw = np.ascontiguousarray(payload).view(np.uint8).reshape(-1)
        if raw.nbytes != 8 * (length + 1):
            raise VectorError(f"secagg-u64 update holds {raw.nbytes} bytes, expected {8 * (length + 1)} "
                              f"(uint64 × {length + 1})")
        return raw.view("<u8")

    def pieces(self, payload: np.ndarray, length: int):
        raise VectorError("a secagg-u64 update is masked: only the secure-sum combiner reads it, whole")


register_decoder(SecAggDecoder())
