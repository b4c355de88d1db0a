"""Streaming FedAvg: a running (weighted sum, total weight) that updates fold into one at a time.

Memory is O(P) whatever the number of clients: nothing keeps the individual updates. FedAvg is
linear, so two partial sums over disjoint clients merge into the sum over all of them; that is
what lets aggregation be split across processes or machines (Ray workers, a hierarchy).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from protos.errors import VectorError

# Work in blocks that stay in cache: the scaled copy of a block never goes to main memory, so
# one fold streams each update once and the accumulator once, like a bare `acc += v`.
_BLOCK = 1 << 15


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
        for start in range(0, self.length, _BLOCK):
            stop = min(start + _BLOCK, self.length)
            tmp = scratch[: stop - start]
            np.multiply(vector[start:stop], w, out=tmp)
            total[start:stop] += tmp
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
        return (self.total / self.dtype.type(self.weight)).astype(np.float32, copy=False)
