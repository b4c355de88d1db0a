"""`int8[:B]`: blocks of B values (default 256), each a float32 scale and B int8 codes; unbiased.

Encodes the delta d = update - global (see `VectorHeader.base_sha256`). Per block,
s = max|d_i| / 127 (rounded up to a float32 so that |d_i| / s <= 127), and each value is
rounded STOCHASTICALLY: q_i = floor(d_i / s + u_i), u_i ~ U[0, 1), so q_i is one of the two
integers around d_i / s and E[q_i] = d_i / s. Decoding gives q_i * s (in float32).

    unbiased:    E[dec(enc(d))] = d  (up to the float32 rounding of q_i * s, relative 2^-24)
    error bound: |dec(enc(d))_i - d_i| < s * (1 + 2^-23) <= max_block|d| / 127 * (1 + 2^-22)
    size:        4 * ceil(P / B) + P bytes (~3.94x smaller than raw at B = 256)

Layout (little-endian): ceil(P/B) records `[float32 scale][B int8 codes]`; the last record has
only P mod B codes when B does not divide P. Each record decodes on its own, so a stream decodes
record by record. The decoder rejects negative, NaN or infinite scales. An all-zero block has
scale 0 and codes 0.
"""

from __future__ import annotations

import numpy as np

from fedort.common.errors import VectorError
from fedort.common.invariants import present
from fedort.protos.update_codecs.base import F32, Codec, DensePiece, StreamDecoder, check_vector

SLAB = 1 << 20  # values quantised per step (bounds the float64 temporaries)
MAX_SCALE = float(np.finfo(F32).max) / 127  # larger scales would decode 127 * s to infinity


def block_scales(blocks: np.ndarray) -> np.ndarray:
    """Per-row float32 scales s with max|row| / s <= 127 exactly (0 for an all-zero row)."""
    peak = np.abs(blocks).max(axis=1).astype(np.float64)
    scales = (peak / 127.0).astype(F32)
    low = scales.astype(np.float64) * 127.0 < peak
    scales[low] = np.nextafter(scales[low], np.float32(np.inf))
    return scales


def quantize(blocks: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(scales, int8 codes) of a 2-D array of blocks, with stochastic rounding."""
    scales = block_scales(blocks)
    s = scales.astype(np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(s > 0, blocks / s, 0.0)
    t += rng.random(t.shape)
    np.floor(t, out=t)
    np.clip(t, -127, 127, out=t)
    return scales, t.astype(np.int8)


class Int8Codec(Codec):
    @property
    def block(self) -> int:
        return int(present(self.spec.param, "the int8 block size"))

    def payload_size(self, length: int) -> int:
        return 4 * (-(-length // self.block)) + length

    def encode(self, vector: np.ndarray, rng: np.random.Generator | None = None) -> bytes:
        vector = check_vector(vector, self.spec)
        rng = rng if rng is not None else np.random.default_rng()
        b = self.block
        n_full = len(vector) // b
        record = np.dtype([("s", "<f4"), ("q", "i1", (b,))])
        out = bytearray()
        step = max(1, SLAB // b)
        for start in range(0, n_full, step):
            stop = min(n_full, start + step)
            scales, codes = quantize(vector[start * b : stop * b].reshape(-1, b), rng)
            recs = np.empty(stop - start, dtype=record)
            recs["s"], recs["q"] = scales, codes
            out += recs.tobytes()
        tail = vector[n_full * b :]
        if len(tail):
            scales, codes = quantize(tail.reshape(1, -1), rng)
            out += scales.astype("<f4").tobytes() + codes.tobytes()
        return bytes(out)

    def _decoder(self, length: int, payload_bytes: int) -> StreamDecoder:
        return _Int8Decoder(self.spec, length, payload_bytes, self.block)


def _check_scales(scales: np.ndarray, first_block: int) -> None:
    bad = ~(np.isfinite(scales) & (scales >= 0) & (scales <= MAX_SCALE))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise VectorError(
            f"int8 payload: block {first_block + i} has scale {scales[i]}; "
            f"scales must be finite, >= 0 and <= {MAX_SCALE:.4g}"
        )


class _Int8Decoder(StreamDecoder):
    def __init__(self, spec, length: int, payload_bytes: int, block: int) -> None:
        super().__init__(spec, length, payload_bytes)
        self.block = block
        self.record = 4 + block
        self._dtype = np.dtype([("s", "<f4"), ("q", "i1", (block,))])

    def _decode(self, view: memoryview) -> list:
        first = self.done // self.record
        n_full = len(view) // self.record
        pieces = []
        if n_full:
            recs = np.frombuffer(view[: n_full * self.record], dtype=self._dtype)
            scales = recs["s"]
            _check_scales(scales, first)
            values = (recs["q"].astype(F32) * scales[:, None]).reshape(-1)
            pieces.append(DensePiece(first * self.block, values))
        rest = view[n_full * self.record :]
        if len(rest):  # the short last block (only once the payload is complete)
            scale = np.frombuffer(rest[:4], dtype="<f4")
            _check_scales(scale, first + n_full)
            codes = np.frombuffer(rest[4:], dtype=np.int8)
            pieces.append(DensePiece((first + n_full) * self.block, codes.astype(F32) * scale[0]))
        return pieces
