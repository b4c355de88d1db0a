"""Combiner: coordinate-wise median, each parameter the median of the clients' values (spec `median`).

    c[j] = median_i vᵢ[j]        (the mean of the two middle values for an even count)

Robust to a minority of arbitrary (Byzantine) updates in every coordinate (Yin et al., 2018).
Unweighted: a client's example count would let a liar buy influence. It needs every update of
the round, so it reads them from the spool in column blocks (memory O(P + block)).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedort.coordinator.aggregation.combiner import Combiner
from fedort.coordinator.aggregation.spool import BLOCK_BYTES, SpooledUpdate, column_blocks, open_updates


def coordinate_median(vectors: Sequence[np.ndarray], block_bytes: int = BLOCK_BYTES) -> np.ndarray:
    """The element-wise median of equal-length float32 vectors (mean of the two middle ones for an even count)."""
    n = len(vectors)
    out = np.empty(len(vectors[0]), dtype=np.float32)
    lo, hi = (n - 1) // 2, n // 2
    for start, block in column_blocks(vectors, block_bytes):
        block.sort(axis=0)  # in place: the buffer is refilled for the next block anyway
        stop = start + block.shape[1]
        if lo == hi:
            out[start:stop] = block[lo]
        else:
            np.add(block[lo], block[hi], out=out[start:stop], dtype=np.float64, casting="same_kind")
            out[start:stop] *= np.float32(0.5)
    return out


class MedianCombiner(Combiner):
    """Coordinate-wise median of the round's updates."""

    name = "median"
    streaming = False

    def combine(self, updates: Sequence[SpooledUpdate], global_vector: np.ndarray) -> np.ndarray:
        return coordinate_median(open_updates(updates, len(global_vector)))
