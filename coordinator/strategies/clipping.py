"""Update-norm clipping: FedAvg over client deltas clipped to a maximum L2 norm.

Each update's delta from the round's global vector, dᵢ = vᵢ − g, is scaled down to norm ≤ C
before the weighted average, so one client can move the model by at most C·nᵢ/Σn. The clipped
vector g + clip(dᵢ) is folded into the running sum like any FedAvg update: still streaming, O(P).
"""

from __future__ import annotations

import math

import numpy as np

from fedort.coordinator.strategies.base import Strategy

_BLOCK = 1 << 16


def delta_norm(vector: np.ndarray, global_vector: np.ndarray) -> float:
    """‖vector − global_vector‖₂: float32 differences per cache-sized block, summed in float64."""
    total = 0.0
    scratch = np.empty(min(len(vector), _BLOCK), dtype=np.float32)
    for start in range(0, len(vector), _BLOCK):
        d = scratch[: min(_BLOCK, len(vector) - start)]
        np.subtract(vector[start:start + _BLOCK], global_vector[start:start + _BLOCK], out=d)
        total += float(np.dot(d, d))   # float32 dot of one block (BLAS, pairwise-accurate enough), float64 total
    return math.sqrt(total)


def clip_update(vector: np.ndarray, global_vector: np.ndarray, max_norm: float) -> np.ndarray:
    """g + dᵢ·min(1, C/‖dᵢ‖) as float32 (the input itself when it is already within the norm)."""
    norm = delta_norm(vector, global_vector)
    if norm <= max_norm:
        return vector
    scale = np.float32(max_norm / norm)
    out = np.empty(len(vector), dtype=np.float32)
    for start in range(0, len(vector), _BLOCK):    # block-wise: the delta never exists in full
        d = out[start:start + _BLOCK]
        np.subtract(vector[start:start + _BLOCK], global_vector[start:start + _BLOCK], out=d)
        d *= scale
        d += global_vector[start:start + _BLOCK]
    return out


class ClippedFedAvg(Strategy):
    """FedAvg of the updates after clipping each delta to L2 norm ≤ `max_norm`."""

    needs_all_updates = False

    def __init__(self, max_norm: float) -> None:
        self.max_norm = float(max_norm)
        self.name = f"clip:{max_norm:g}"

    def prepare(self, vector: np.ndarray, global_vector: np.ndarray) -> np.ndarray:
        return clip_update(vector, global_vector, self.max_norm)
