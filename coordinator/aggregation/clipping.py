"""Transform: clip each update's delta from the global vector to L2 norm ≤ C (spec `clip:C`).

    dᵢ = vᵢ − g,    vᵢ' = g + dᵢ · min(1, C / ‖dᵢ‖₂)

Followed by the weighted mean, one client can move the model by at most C·nᵢ/Σn. The clipped
vector is folded into the running sum like any FedAvg update: still streaming, O(P).
"""

from __future__ import annotations

import math

import numpy as np

from fedort.coordinator.aggregation.transform import Transform
from fedort.coordinator.aggregation.update import BLOCK as _BLOCK
from fedort.coordinator.aggregation.update import Update


def delta_norm(vector: np.ndarray, global_vector: np.ndarray) -> float:
    """‖vector − global_vector‖₂: float32 differences per cache-sized block, summed in float64."""
    total = 0.0
    scratch = np.empty(min(len(vector), _BLOCK), dtype=np.float32)
    for start in range(0, len(vector), _BLOCK):
        d = scratch[: min(_BLOCK, len(vector) - start)]
        np.subtract(vector[start : start + _BLOCK], global_vector[start : start + _BLOCK], out=d)
        total += float(np.dot(d, d))  # float32 dot of one block (BLAS, pairwise-accurate enough), float64 total
    return math.sqrt(total)


def clip_update(vector: np.ndarray, global_vector: np.ndarray, max_norm: float) -> np.ndarray:
    """g + dᵢ·min(1, C/‖dᵢ‖) as float32 (the input itself when it is already within the norm)."""
    norm = delta_norm(vector, global_vector)
    if norm <= max_norm:
        return vector
    scale = np.float32(max_norm / norm)
    out = np.empty(len(vector), dtype=np.float32)
    for start in range(0, len(vector), _BLOCK):  # block-wise: the delta never exists in full
        d = out[start : start + _BLOCK]
        np.subtract(vector[start : start + _BLOCK], global_vector[start : start + _BLOCK], out=d)
        d *= scale
        d += global_vector[start : start + _BLOCK]
    return out


class NormClip(Transform):
    """Clip the delta from the global vector to L2 norm ≤ `max_norm`."""

    def __init__(self, max_norm: float) -> None:
        self.max_norm = float(max_norm)
        self.name = f"clip:{max_norm:g}"

    def apply(self, values: np.ndarray, global_vector: np.ndarray, update: Update | None = None) -> np.ndarray:
        return clip_update(values, global_vector, self.max_norm)
