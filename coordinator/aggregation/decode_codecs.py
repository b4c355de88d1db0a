"""The built-in update codecs (protos/codecs) as decoders: raw, fp16, bf16, int8[:B], topk:F, zstd+any.

    raw:      v = frombuffer(payload, '<f4')           the update itself, decoded without a copy
    others:   v = dec(payload) = update − g             (delta: the header's base_sha256 names g)

Error bounds and layouts are the codecs' own (protos/update_codecs/__init__.py). Every family streams:
admission's receiver validates a payload chunk by chunk while spooling it (`stream`), and the
fold decodes the spooled payload again into the combiner (`pieces`/`blocks`).
"""

from __future__ import annotations

import numpy as np

from fedort.common.errors import VectorError
from fedort.coordinator.aggregation.decode import Decoder, PieceStream, register_decoder
from fedort.coordinator.aggregation.update import BLOCK, Blocks
from fedort.protos.update_codecs import get_codec, parse_codec
from fedort.protos.update_codecs.spec import NAMES, ZSTD_PREFIX


class CodecDecoder(Decoder):
    """One protos.codecs family; `bind(spec)` gives the decoder of one parameterised spec."""

    streams = True

    def __init__(self, family: str, spec: str | None = None) -> None:
        self.codec = family
        self.spec = spec
        parsed = parse_codec(spec) if spec else None
        base = family[len(ZSTD_PREFIX) :] if family.startswith(ZSTD_PREFIX) else family
        self.delta = base != "raw"
        self.dense_float32 = family == "raw"
        self._codec = get_codec(parsed) if parsed else None

    def bind(self, spec: str) -> CodecDecoder:
        if spec == self.spec:
            return self
        if parse_codec(spec).canonical.partition(":")[0] != self.codec:
            raise VectorError(f"codec {spec!r} is not of the {self.codec} family")
        return CodecDecoder(self.codec, spec)

    def _bound(self):
        if self._codec is None:
            raise VectorError(f"codec {self.codec} needs a parameter, e.g. {self.codec}:0.01")
        return self._codec

    def payload_bytes(self, length: int, declared: int) -> int:
        exact = self._bound().payload_size(length)
        if exact is None and declared <= 0:
            raise VectorError(f"{self.spec} payloads vary in size: the header must give payload_bytes")
        self._bound().decoder(length, declared or exact)  # raises VectorError for a size the layout cannot have
        return declared or exact

    def stream(self, length: int, payload_bytes: int) -> PieceStream:
        return self._bound().decoder(length, payload_bytes)

    def decode(self, payload: np.ndarray, length: int) -> np.ndarray:
        if self.dense_float32:
            return _raw_view(payload, length)
        return super().decode(payload, length)

    def blocks(self, payload: np.ndarray, length: int, block: int = BLOCK) -> Blocks:
        if self.dense_float32:  # views of the payload (a memory map of the spool file): no copy
            values = _raw_view(payload, length)
            return ((s, values[s : s + block]) for s in range(0, length, block))
        return super().blocks(payload, length, block)


def _raw_view(payload: np.ndarray, length: int) -> np.ndarray:
    if payload.dtype == np.float32 and payload.shape == (length,):
        return payload
    raw = np.ascontiguousarray(payload).view(np.uint8).reshape(-1)
    if raw.nbytes != 4 * length:
        raise VectorError(f"raw update holds {raw.nbytes} bytes, expected {4 * length} (float32 × {length})")
    return raw.view("<f4")


for _name in NAMES:
    register_decoder(CodecDecoder(_name, _name if _name != "topk" else None))
    register_decoder(CodecDecoder(ZSTD_PREFIX + _name, ZSTD_PREFIX + _name if _name != "topk" else None))
