"""The masked-upload codecs of secure aggregation: `secagg-u64` and `secagg-packed:b` (P + 1 words in Z_{2^b}).

    y = unpack(payload)   payload_bytes = 8·(P + 1)  (secagg-u64)  |  (b/8)·(P + 1)  (secagg-packed:b)

(`protos.secagg.pack`: P masked values, then the masked weight, little-endian). Not float values:
a masked vector is uniform noise on its own, so it is never dequantized nor checked for
finiteness (its stream validation only counts bytes — any b/8 bytes are a word below 2^b — and
the receiver checks the sha256; the round checks that b is its own, `SecAggRound.check_upload`).
Only a combiner that `folds_words` (`secure_sum.SecureSum`) consumes it: it sums the masked words
mod 2^b and decodes the unmasked SUM; `decode` therefore returns the uint64 words, not floats.
"""

from __future__ import annotations

import numpy as np

from fedort.common.errors import VectorError
from fedort.common.secagg.pack import PACKED_FAMILY, U64_CODEC, packed_bits, payload_size, unpack
from fedort.coordinator.aggregation.decode import Decoder, register_decoder


class _CountingStream:
    """Stream 'validation' of a masked payload: any bytes are a valid word; the size is checked upstream."""

    def feed(self, chunk: bytes | memoryview) -> list:
        return []

    def finish(self) -> list:
        return []


class SecAggDecoder(Decoder):
    codec = U64_CODEC
    streams = True  # nothing to decode while spooling: no float finiteness check on masked words
    spec = U64_CODEC

    def payload_bytes(self, length: int, declared: int) -> int:
        expected = payload_size(self.spec, length)
        if declared not in (0, expected):
            raise VectorError(
                f"{self.spec} payload for {length} values must be {expected} bytes "
                f"({expected // (length + 1)} bytes × {length + 1} words), header says {declared}"
            )
        return expected

    def stream(self, length: int, payload_bytes: int) -> _CountingStream:
        return _CountingStream()

    def decode(self, payload: np.ndarray, length: int) -> np.ndarray:
        """The masked uint64 vector of length P + 1 (a view of the payload for secagg-u64)."""
        return unpack(payload, self.spec, length)

    def pieces(self, payload: np.ndarray, length: int):
        raise VectorError(f"a {self.spec} update is masked: only the secure-sum combiner reads it, whole")

    def bind(self, spec: str) -> SecAggDecoder:
        if spec != U64_CODEC:
            raise VectorError(f"codec {U64_CODEC!r} takes no parameter, got {spec!r}")
        return self


class SecAggPackedDecoder(SecAggDecoder):
    codec = PACKED_FAMILY
    spec = f"{PACKED_FAMILY}:64"

    def bind(self, spec: str) -> SecAggPackedDecoder:
        packed_bits(spec)  # VectorError (INVALID_ARGUMENT) for a malformed b
        bound = SecAggPackedDecoder()
        bound.spec = spec
        return bound


register_decoder(SecAggDecoder())
register_decoder(SecAggPackedDecoder())
