"""Combiner: coordinate-wise β-trimmed mean (spec `trimmed-mean:β`).

    k = min(⌊β·n⌋, ⌊(n − 1)/2⌋),   c[j] = mean of the sorted values v₍ₖ₎[j] … v₍ₙ₋ₖ₋₁₎[j]

The k largest and k smallest values of each coordinate are dropped and the rest averaged.

Tolerates up to ⌊β·n⌋ Byzantine clients per side (Yin et al., 2018) and keeps more of the
honest information than the median. Unweighted, like the median; read from the spool in blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedort.common.errors import VectorError
from fedort.coordinator.aggregation.combiner import Combiner
from fedort.coordinator.aggregation.spool import BLOCK_BYTES, SpooledUpdate, column_blocks, open_updates


def trimmed_count(n: int, beta: float) -> int:
    """How many values are trimmed per side for `n` clients: ⌊β·n⌋, at most (n − 1) // 2 so one is left."""
    return min(int(beta * n + 1e-9), (n - 1) // 2)


def trimmed_mean(vectors: Sequence[np.ndarray], beta: float, block_bytes: int = BLOCK_BYTES) -> np.ndarray:
    """The element-wise mean of the values left after trimming ⌊β·n⌋ from each side."""
    if not 0 <= beta < 0.5:
        raise VectorError(f"trimmed-mean beta must be in [0, 0.5), got {beta}")
    n = len(vectors)
    k = trimmed_count(n, beta)
    out = np.empty(len(vectors[0]), dtype=np.float32)
    for start, block in column_blocks(vectors, block_bytes):
        if k:
            block.sort(axis=0)
        out[start : start + block.shape[1]] = block[k : n - k].mean(axis=0, dtype=np.float64)
    return out


class TrimmedMeanCombiner(Combiner):
    """Coordinate-wise β-trimmed mean of the round's updates."""

    streaming = False

    def __init__(self, beta: float) -> None:
        self.beta = float(beta)
        self.name = f"trimmed-mean:{beta:g}"

    def combine(self, updates: Sequence[SpooledUpdate], global_vector: np.ndarray) -> np.ndarray:
        return trimmed_mean(open_updates(updates, len(global_vector)), self.beta)
