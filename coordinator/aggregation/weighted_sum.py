"""Combiner: streaming FedAvg, the example-weighted mean folded in one update at a time (the default).

    c = Σᵢ nᵢ·xᵢ / Σᵢ nᵢ        (Σ accumulated in float64, the mean rounded once to float32)

An update sent as a delta dᵢ = xᵢ − g (lossy codecs) is folded as its decoded pieces, sparse ones
in O(k), and the global vector is added once at the end, not once per client:

    c = (Σ_whole nᵢ·xᵢ + Σ_delta nᵢ·dᵢ + g·Σ_delta nᵢ) / Σᵢ nᵢ

The accumulator is zeroed lazily: after `reset` the first dense fold writes 0 + w·v straight into
it (same bits as adding to zeros, -0 included) instead of a 40 MB fill at round open followed by a
read of those zeros; anything else that needs the sum materialises the zeros first.

Memory is O(P) whatever the number of clients: nothing keeps the individual updates. FedAvg is
linear, so two partial sums over disjoint clients merge into the sum over all of them; that is
what lets aggregation be split across processes or machines (Ray workers, a hierarchy).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedort.common.buffer_pool import BufferPool
from fedort.common.errors import VectorError
from fedort.common.invariants import present
from fedort.coordinator.aggregation.combiner import Combiner
from fedort.coordinator.aggregation.halves import in_halves
from fedort.coordinator.aggregation.spool import SpooledUpdate
from fedort.coordinator.aggregation.update import BLOCK as _BLOCK
from fedort.coordinator.aggregation.update import as_blocks
from fedort.protos.update_codecs import Piece


@dataclass
class WeightedSum:
    """Σ wᵢ·vᵢ and Σ wᵢ over the updates folded in so far."""

    length: int
    dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float32))
    weight: float = field(default=0.0, init=False)
    count: int = field(default=0, init=False)
    delta_weight: float = field(default=0.0, init=False)  # Σ wᵢ of the updates folded as deltas from g

    def __post_init__(self) -> None:
        self._total = np.zeros(self.length, dtype=self.dtype)
        self._zero = False  # True: `_total` holds stale values that stand for zeros (see `reset`)
        self._scratch = np.empty(min(self.length, _BLOCK), dtype=self.dtype)

    @property
    def total(self) -> np.ndarray:
        """Σ wᵢ·vᵢ (the accumulator itself)."""
        if self._zero:
            self._total.fill(0)
            self._zero = False
        return self._total

    @total.setter
    def total(self, value: np.ndarray) -> None:  # `s.total += x` assigns the (same) array back
        self._total, self._zero = value, False

    def add(self, vector: np.ndarray, weight: float) -> None:
        """Fold `weight * vector` into the sum."""
        if vector.shape != (self.length,):
            raise VectorError(f"update must have {self.length} elements, got shape {vector.shape}")
        self.add_blocks(as_blocks(vector), weight)

    def add_blocks(self, blocks: Iterable[tuple[int, np.ndarray]], weight: float) -> None:
        """Fold `weight * v` into the sum, v given as (start, block) pairs covering it in order.

        A decoder streams its output here without materialising v; the blocks may have any size.
        """
        if not weight > 0:
            raise VectorError(f"update weight must be > 0, got {weight}")
        w = self.dtype.type(weight)
        first = self._zero  # the accumulator stands for zeros: write 0 + w·v, do not read it
        total, scratch, zero = self._total, self._scratch, self.dtype.type(0)
        copyto, multiply, add = np.copyto, np.multiply, np.add
        covered = 0
        for start, values in blocks:
            for offset in range(0, len(values), _BLOCK):  # (re)block to the cache-sized scratch
                part = values[offset : offset + _BLOCK]
                n = len(part)
                acc = total[start + offset : start + offset + n]
                tmp = scratch if n == len(scratch) else scratch[:n]
                # cast first, then multiply same-typed: a float32 x float64 multiply runs numpy's
                # buffered mixed-type loop; cast + multiply + add give the same bits, faster
                if part.dtype == tmp.dtype:
                    multiply(part, w, out=tmp)
                else:
                    copyto(tmp, part, casting="same_kind")
                    multiply(tmp, w, out=tmp)
                if first:
                    add(tmp, zero, out=acc)  # = 0 + w·v, bit for bit (a -0 becomes +0 as when added to zeros)
                else:
                    add(acc, tmp, out=acc)  # not `acc += tmp` on a slice: that also runs __setitem__
            covered += len(values)
        if covered != self.length:  # (after a first fold `_zero` stays set: the partial writes are not kept)
            raise VectorError(f"update must have {self.length} elements, got {covered}")
        self._zero = False
        self.weight += float(weight)
        self.count += 1

    def add_delta_pieces(self, pieces: Iterable[Piece], weight: float) -> None:
        """Fold `weight * d` for a delta d = x − g given as decoded pieces; `mean(g)` adds g·Σ wᵢ once.

        Sparse pieces cost O(k): no dense copy of d exists. Each piece is checked to stay in range.
        """
        if not weight > 0:
            raise VectorError(f"update weight must be > 0, got {weight}")
        for piece in pieces:
            piece.add_to(self.total, weight)
        self.weight += float(weight)
        self.delta_weight += float(weight)
        self.count += 1

    def reset(self) -> None:
        """Back to the empty sum, reusing the accumulator's pages (zeroed lazily: see the module docstring)."""
        self._zero = True
        self.weight, self.count, self.delta_weight = 0.0, 0, 0.0

    def merge(self, other: WeightedSum) -> None:
        """Add another partial sum (over a disjoint set of clients) into this one."""
        if other.length != self.length:
            raise VectorError(f"cannot merge sums of {other.length} and {self.length} elements")
        self.total += other.total
        self.weight += other.weight
        self.count += other.count
        self.delta_weight += other.delta_weight

    def mean(self, base: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """The weighted average (Σ wᵢ·vᵢ + base·Σ_delta wᵢ) / Σ wᵢ as float32 (`base`: the global g), written
        into `out` (P float32 values) if given, else into a new array; returns it."""
        if self.count == 0:
            raise VectorError("no updates were folded in; the weighted mean is undefined")
        if out is None:
            out = np.empty(self.length, dtype=np.float32)  # divide straight into float32: no float64 temporary
        if not self.delta_weight:
            in_halves(
                lambda lo, hi: np.divide(
                    self.total[lo:hi], self.dtype.type(self.weight), out=out[lo:hi], casting="same_kind"
                ),
                self.length,
            )
            return out
        if base is None:
            raise VectorError("deltas were folded in: the mean needs the global vector they are relative to")
        scratch = np.empty(min(self.length, _BLOCK), dtype=self.dtype)
        for start in range(0, self.length, _BLOCK):  # block-wise: no P-sized float64 temporary
            part = scratch[: min(_BLOCK, self.length - start)]
            np.multiply(base[start : start + _BLOCK], self.dtype.type(self.delta_weight), out=part)
            part += self.total[start : start + _BLOCK]
            np.divide(part, self.dtype.type(self.weight), out=out[start : start + _BLOCK], casting="same_kind")
        return out


class WeightedMean(Combiner):
    """Σ nᵢ·vᵢ / Σ nᵢ, streaming in a float64 `WeightedSum` kept for the whole run.

    Each round's mean is written into a recycled array (`fedort.common.buffer_pool`): one that nothing holds any
    more (not the engine's global vector, an export, a download, the next round's aggregator). A fresh
    array per round may page-fault anew, which costs more than the mean itself."""

    name = "fedavg"
    streaming = True
    folds_deltas = True
    KEEP = 3  # arrays recycled: the global being trained from, the one an export may still hold, the new one

    def __init__(self) -> None:
        self._sum: WeightedSum | None = None
        self._outputs = BufferPool(self.KEEP)

    def reset(self, length: int) -> None:
        if self._sum is None or self._sum.length != length:
            self._sum = WeightedSum(length, np.dtype(np.float64))
        # reuse the accumulator: a fresh np.zeros would page-fault all 8*P bytes again inside the
        # first fold of the next round, on an upload's critical path
        self._sum.reset()

    @property
    def _accumulator(self) -> WeightedSum:
        return present(self._sum, "the weighted sum (reset opens it)")

    def fold(self, blocks: Iterable[tuple[int, np.ndarray]], weight: float) -> None:
        self._accumulator.add_blocks(blocks, weight)

    def fold_delta(self, pieces: Iterable[Piece], weight: float) -> None:
        """Fold a delta from the global vector as the codec's pieces (the global is added once, in combine)."""
        self._accumulator.add_delta_pieces(pieces, weight)

    def combine(self, spooled: Sequence[SpooledUpdate], global_vector: np.ndarray) -> np.ndarray:
        s = self._accumulator
        return s.mean(global_vector, out=self._outputs.take(s.length))
