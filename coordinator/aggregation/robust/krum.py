"""Combiner: Krum and multi-Krum, keep the updates closest to their neighbours and average those.

    score(i) = Σ_{j ∈ N_i} ‖vᵢ − vⱼ‖²   (N_i: the n − f − 2 updates nearest to vᵢ)
    S = the m lowest scores,   c = Σ_{i∈S} nᵢ·vᵢ / Σ_{i∈S} nᵢ

Each update is scored by the sum of its squared distances to its n − f − 2 nearest other updates
(f: the Byzantine clients assumed); Krum keeps the best-scored one, multi-Krum the m best and
averages them weighted by examples, like FedAvg over the survivors (Blanchard et al., 2017;
El Mhamdi et al., 2018). The n × n distances are accumulated over column blocks of the spooled
updates, so memory is O(n² + block + P).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from fedort.coordinator.aggregation.combiner import Combiner
from fedort.coordinator.aggregation.spool import BLOCK_BYTES, SpooledUpdate, column_blocks, open_updates
from fedort.coordinator.aggregation.weighted_sum import WeightedSum

log = logging.getLogger(__name__)


def pairwise_sq_distances(vectors: Sequence[np.ndarray], block_bytes: int = BLOCK_BYTES) -> np.ndarray:
    """The symmetric n × n matrix of squared L2 distances ‖vᵢ − vⱼ‖², in float64."""
    n = len(vectors)
    dist = np.zeros((n, n), dtype=np.float64)
    # the float64 differences of one block against one row take at most twice the block's bytes
    for _, block in column_blocks(vectors, block_bytes // 2):
        for i in range(n - 1):
            diff = np.subtract(block[i + 1 :], block[i], dtype=np.float64)
            dist[i, i + 1 :] += np.einsum("ij,ij->i", diff, diff)
    return dist + dist.T


def neighbours_counted(n: int, f: int) -> int:
    """How many nearest neighbours score an update: n − f − 2, at least 1 and at most n − 1."""
    return max(1, min(n - 1, n - f - 2))


def krum_scores(dist: np.ndarray, f: int) -> np.ndarray:
    """Each update's Krum score: the sum of its squared distances to its n − f − 2 nearest others."""
    n = len(dist)
    if n == 1:
        return np.zeros(1)
    k = neighbours_counted(n, f)
    others = np.where(np.eye(n, dtype=bool), np.inf, dist)
    return np.sort(others, axis=1)[:, :k].sum(axis=1)


def krum_select(dist: np.ndarray, f: int, m: int = 1) -> list[int]:
    """Indices of the `m` best-scored updates (ties: the lower index), best first."""
    scores = krum_scores(dist, f)
    return [int(i) for i in np.argsort(scores, kind="stable")[: max(1, min(m, len(scores)))]]


class KrumCombiner(Combiner):
    """Multi-Krum with `f` assumed Byzantine clients and `m` selected updates (m = 1: Krum)."""

    streaming = False

    def __init__(self, f: int, m: int = 1) -> None:
        self.f, self.m = int(f), int(m)
        self.name = f"krum:{f}" if m == 1 else f"multi-krum:{f}:{m}"

    def combine(self, updates: Sequence[SpooledUpdate], global_vector: np.ndarray) -> np.ndarray:
        n = len(updates)
        if n < 2 * self.f + 3:
            log.warning(
                "%s: %d updates are fewer than the 2f + 3 = %d Krum's guarantee needs; scoring each "
                "by its %d nearest neighbours",
                self.name,
                n,
                2 * self.f + 3,
                neighbours_counted(n, self.f),
            )
        vectors = open_updates(updates, len(global_vector))
        chosen = krum_select(pairwise_sq_distances(vectors), self.f, self.m)
        log.info("%s kept %s", self.name, [updates[i].client_id for i in chosen])
        total = WeightedSum(len(global_vector), np.dtype(np.float64))
        for i in chosen:
            total.add(vectors[i], updates[i].num_examples)
        return total.mean()
