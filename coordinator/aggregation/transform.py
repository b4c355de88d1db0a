"""Stage 2, per-update transforms: each decoded update vᵢ is mapped to T_k(…T_1(vᵢ)) before the combiner.

    vᵢ' = T_k(… T_1(vᵢ; g) …; g)        g: the round's global vector

A transform sees one update at a time (its values, the round's global vector and the update's
identity: client id, example count), so it stays O(P) and streaming. Norm clipping
(`clipping.NormClip`) is one; client-level noise for differential privacy will be another file.
Transforms apply to streaming combiners only (a spool combiner reads the raw spool files).
"""

from __future__ import annotations

import numpy as np

from fedort.coordinator.aggregation.update import Update


class Transform:
    """One per-update step of the chain (the base class is the identity)."""

    name = "identity"

    def apply(self, values: np.ndarray, global_vector: np.ndarray, update: Update | None) -> np.ndarray:
        """The transformed float32 values; may return `values` itself, must not modify it in place.

        `update` names the client and its example count (None when called outside a round).
        """
        return values

    def __str__(self) -> str:
        return self.name
