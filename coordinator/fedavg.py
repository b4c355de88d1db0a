"""Streaming FedAvg: a running (weighted sum, total weight) that updates fold into one at a time.

Memory is O(P) whatever the number of clients: nothing keeps the individual updates. FedAvg is
linear, so two partial sums over disjoint clients merge into the sum over all of them; that is
what lets aggregation be split across processes or machines (Ray workers, a hierarchy).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedort.protos.errors import VectorError

# Work in blocks that stay in cache: the scaled copy of a block never goes to main memory, so
# one fold streams each update once and the accumulator once, like a bare `acc += v`.
# 2**16 elements (256/512 KB scratch) fits L2 and keeps the per-block Python calls a few % of the time
# (2**15..2**17 measured within noise of each other on a 2 MB-L2 Xeon; 2**16 best or tied).
_BLOCK = 1 << 16


@dataclass
class WeightedSum:
    """Σ wᵢ·vᵢ and Σ wᵢ over the updates folded in so far."""

    length: int
    dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float32))
    total: np.ndarray = field(init=False)
    weight: float = field(default=0.0, init=False)
    count: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.total = np.zeros(self.length, dtype=self.dtype)
        self._scratch = np.empty(min(self.length, _BLOCK), dtype=self.dtype)

    def add(self, vector: np.ndarray, weight: float) -> None:
        """Fold `weight * vector` into the sum."""
        if vector.shape != (self.length,):
            raise VectorError(f"update must have {self.length} elements, got shape {vector.shape}")
        if not weight > 0:
            raise VectorError(f"update weight must be > 0, got {weight}")
        w = self.dtype.type(weight)
        total, scratch = self.total, self._scratch
        multiply, add = np.multiply, np.add
        for start in range(0, self.length, _BLOCK):
            acc = total[start:start + _BLOCK]
            tmp = scratch if len(acc) == len(scratch) else scratch[: len(acc)]
            multiply(vector[start:start + _BLOCK], w, out=tmp)
            add(acc, tmp, out=acc)  # not `acc += tmp` on a slice: that also runs __setitem__
        self.weight += float(weight)
        self.count += 1

    def merge(self, other: "WeightedSum") -> None:
        """Add another partial sum (over a disjoint set of clients) into this one."""
        if other.length != self.length:
            raise VectorError(f"cannot merge sums of {other.length} and {self.length} elements")
        self.total += other.total
        self.weight += other.weight
        self.count += other.count

    def mean(self) -> np.ndarray:
        """The weighted average Σ wᵢ·vᵢ / Σ wᵢ as float32."""
        if self.count == 0:
            raise VectorError("no updates were folded in; the weighted mean is undefined")
        out = np.empty(self.length, dtype=np.float32)  # divide straight into float32: no float64 temporary
        np.divide(self.total, self.dtype.type(self.weight), out=out, casting="same_kind")
        return out
