"""Fixed-point encoding of weighted updates in Z_{2^b}, sized so that a cohort's sum cannot wrap.

A client clips each value to [-c, c], multiplies by its weight w in [0, w_max] and rounds,
q_i = round(w * x_i * s) with scale s; the weight travels as one more element, round(w * s).
A negative q is stored as 2^b + q. The sum over n clients, taken mod 2^b, equals the integer
sum exactly when every partial sum stays inside the representable range:

    2 * n * round(w_max * c * s) < 2^b     (signed values)
        n * round(w_max * s)     < 2^b     (the weight element)

`FixedPoint.for_cohort` picks the smallest such b and refuses b > 64, because accumulators are
uint64 (numpy's wrapping add is then exact mod 2^b for every b <= 64, since 2^b divides 2^64),
and refuses w_max * max(c, 1) * s >= 2^52, where float64 rounding would stop being exact.
Only the final SUM is ever decoded: `decode_sum` maps it back to signed integers and divides by s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedort.common.errors import ConfigError, VectorError
from fedort.common.scratch import scratch

MAX_BITS = 64
_BLOCK = 1 << 15  # values encoded at a time: two buffers of at most 256 KiB
_EXACT_FLOAT = 2.0**52


def modulus_bits(cohort: int, clip: float, scale: float, max_weight: float = 1.0) -> int:
    """Smallest b such that the sum of `cohort` encoded vectors cannot wrap mod 2^b."""
    if cohort < 1:
        raise ConfigError(f"secagg cohort must be >= 1, got {cohort}")
    if not (clip > 0 and scale > 0 and max_weight > 0) or not all(math.isfinite(v) for v in (clip, scale, max_weight)):
        raise ConfigError(
            f"secagg clip, scale and max_weight must be finite and > 0, got clip={clip} "
            f"scale={scale} max_weight={max_weight}"
        )
    if max_weight * max(clip, 1.0) * scale >= _EXACT_FLOAT:
        raise ConfigError(
            f"secagg fixed point: max_weight*max(clip,1)*scale = {max_weight * max(clip, 1.0) * scale:.3g} "
            f"must stay below 2^52 for exact float64 rounding; lower the scale"
        )
    value_bound = cohort * round(max_weight * clip * scale)
    weight_bound = cohort * round(max_weight * scale)
    bits = max(2 * value_bound, weight_bound).bit_length()
    if bits > MAX_BITS:
        raise ConfigError(
            f"secagg fixed point would need {bits} bits for cohort={cohort} clip={clip} "
            f"scale={scale} max_weight={max_weight} (at most {MAX_BITS}); lower the scale or clip"
        )
    return max(bits, 1)


@dataclass(frozen=True)
class FixedPoint:
    """The public encoding parameters of one secure-aggregation round."""

    clip: float
    scale: float
    bits: int
    max_weight: float = 1.0

    @classmethod
    def for_cohort(cls, cohort: int, clip: float, scale: float, max_weight: float = 1.0) -> FixedPoint:
        return cls(clip, scale, modulus_bits(cohort, clip, scale, max_weight), max_weight)

    @property
    def modulus_mask(self) -> np.uint64:
        return np.uint64((1 << self.bits) - 1)

    def encode(self, vector: np.ndarray, weight: float = 1.0) -> np.ndarray:
        """Clip, pre-multiply by `weight`, round; returns uint64 of length P + 1 (weight last)."""
        out = np.zeros(np.asarray(vector).size + 1, dtype=np.uint64)
        self.add_encoded(out, vector, weight)
        out &= self.modulus_mask
        return out

    def add_encoded(
        self, acc: np.ndarray, vector: np.ndarray, weight: float = 1.0, minus: np.ndarray | None = None
    ) -> None:
        """acc += encode(vector − minus, weight) (`minus` absent: of `vector`), mod 2^64 in a uint64 `acc`, mod
        2^32 in a uint32 one (b ≤ 32: then 2^b divides 2^32 and every encoded value fits an int32); the caller
        reduces mod 2^b. Worked through in cache-sized blocks with borrowed scratch buffers, so no vector-sized
        temporary is made (the difference is taken in float64 block by block); `acc` is left as it was on a
        VectorError."""
        vec = np.asarray(vector)
        if vec.ndim != 1:
            raise VectorError(f"secagg encode expects a 1-D vector, got shape {vec.shape}")
        base = None if minus is None else np.asarray(minus)
        if base is not None and base.shape != vec.shape:
            raise VectorError(f"secagg encode: the vector has shape {vec.shape}, what it is taken from {base.shape}")
        if acc.shape != (vec.size + 1,) or acc.dtype not in (np.uint64, np.uint32):
            raise VectorError(
                f"secagg encode adds into uint64 or uint32 of shape ({vec.size + 1},), got {acc.dtype} {acc.shape}"
            )
        if acc.dtype == np.uint32 and self.bits > 32:
            raise VectorError(f"secagg encode: {self.bits}-bit words do not fit a uint32 accumulator")
        for v in (vec, base) if base is not None else (vec,):  # NaN propagates through min and max
            if v.size and not (math.isfinite(v.min()) and math.isfinite(v.max())):
                raise VectorError("secagg encode: the vector holds NaN or infinity")
        if not (0.0 <= weight <= self.max_weight):
            raise VectorError(f"secagg encode: weight must be in [0, {self.max_weight}], got {weight}")
        factor = weight * self.scale
        block = min(vec.size, _BLOCK) or 1
        ints_dtype = np.int32 if acc.dtype == np.uint32 else np.int64
        with scratch(8 * block) as floats_buf, scratch(8 * block) as ints_buf:
            floats = np.frombuffer(floats_buf, dtype=np.float64, count=block)
            ints = np.frombuffer(ints_buf, dtype=ints_dtype, count=block)
            words = ints.view(acc.dtype)
            for start in range(0, vec.size, block):
                n = min(block, vec.size - start)
                s, q = floats[:n], ints[:n]
                if base is None:
                    np.clip(vec[start : start + n], -self.clip, self.clip, out=s, dtype=np.float64)
                else:
                    np.subtract(vec[start : start + n], base[start : start + n], out=s, dtype=np.float64)
                    np.clip(s, -self.clip, self.clip, out=s)
                s *= factor
                np.rint(s, out=s)
                np.copyto(q, s, casting="unsafe")  # integral and in range: exact
                part = acc[start : start + n]
                np.add(part, words[:n], out=part)
        tail = acc[-1:]  # the weight, added as an array: it wraps like the values, without an overflow warning
        np.add(tail, np.array([round(factor) % (1 << (8 * acc.dtype.itemsize))], dtype=acc.dtype), out=tail)

    def to_signed(self, total: np.ndarray) -> np.ndarray:
        """Integers mod 2^b -> the signed integers they stand for (int64)."""
        total = np.asarray(total, dtype=np.uint64) & self.modulus_mask
        if self.bits == 64:
            return total.view(np.int64)
        signed = total.astype(np.int64)
        signed[total >= np.uint64(1 << (self.bits - 1))] -= np.int64(1 << self.bits)
        return signed

    def decode_sum(self, total: np.ndarray) -> tuple[np.ndarray, float]:
        """Unmasked sum mod 2^b -> (sum of w*x as float64, sum of weights)."""
        signed = self.to_signed(total)
        return signed[:-1].astype(np.float64) / self.scale, float(signed[-1]) / self.scale

    def to_dict(self) -> dict[str, Any]:
        return {"clip": self.clip, "scale": self.scale, "bits": self.bits, "max_weight": self.max_weight}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FixedPoint:
        return cls(float(data["clip"]), float(data["scale"]), int(data["bits"]), float(data["max_weight"]))
