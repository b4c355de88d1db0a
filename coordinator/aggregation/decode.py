"""Stage 1, decode: the wire codec of an update -> its float32 values, by codec name.

    values = decoder_for(update.codec).decode(update.encoded(), length)        # v ∈ float32^P

A decoder turns the payload bytes into the P float32 values the rest of the pipeline works on,
either whole (`decode`) or block by block (`blocks`), so a codec that expands its payload
(fp16, int8, top-k) can stream straight into the combiner's fold without ever holding the P
float32 values. Every codec is one file that defines a `Decoder` subclass and registers it here
with `register_decoder` (and is imported by the package's `__init__`); admission accepts exactly the codecs registered (`codecs()`).
"""

from __future__ import annotations

import numpy as np

from fedort.coordinator.aggregation.update import BLOCK, Blocks
from fedort.protos.errors import VectorError


class Decoder:
    """Payload bytes of one codec -> float32 values. Subclasses implement `decode` or `blocks` (or both)."""

    codec = ""
    float_payload = True      # the payload is float32 values: the upload path checks them finite

    def payload_words(self, length: int) -> int:
        """Size of the payload of a length-P update in 4-byte words (P for raw float32)."""
        return length

    def decode(self, payload: np.ndarray, length: int) -> np.ndarray:
        """All `length` values as one float32 array (a view of `payload` where the codec allows)."""
        out = np.empty(length, dtype=np.float32)
        for start, block in self.blocks(payload, length, BLOCK):
            out[start:start + len(block)] = block
        return out

    def blocks(self, payload: np.ndarray, length: int, block: int = BLOCK) -> Blocks:
        """The values in order as (start, float32 block) pairs of at most `block` values each."""
        values = self.decode(payload, length)
        for start in range(0, length, block):
            yield start, values[start:start + block]


_REGISTRY: dict[str, Decoder] = {}


def register_decoder(decoder: Decoder) -> Decoder:
    """Make `decoder` the one for its codec name (a later registration replaces an earlier one)."""
    if not decoder.codec:
        raise ValueError(f"{type(decoder).__name__} names no codec")
    _REGISTRY[decoder.codec] = decoder
    return decoder


def decoder_for(codec: str) -> Decoder:
    """The registered decoder of `codec`; VectorError (INVALID_ARGUMENT) names the known codecs."""
    try:
        return _REGISTRY[codec]
    except KeyError:
        raise VectorError(f"update codec must be one of {codecs()}, got {codec!r}") from None


def codecs() -> list[str]:
    """The codec names an update may use, sorted."""
    return sorted(_REGISTRY)

