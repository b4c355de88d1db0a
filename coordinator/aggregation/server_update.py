"""Stage 4, the server update: the round's combined vector c -> the next global vector g'.

    Δ = g − c            (the pseudo-gradient)
    g' = apply(g, c)     identity: g' = c;  FedAvgM / FedAdam: g' = g − η·step(Δ, state)

A server optimizer keeps state across rounds (momentum, moments, a step count). The round engine
makes that state durable with each round's commit: after `apply`, it writes `state()` (named
float arrays) atomically to the state dir's server-state file of the next round BEFORE the
round's commit row, and on restart passes the file of the round it resumes to `load_state`. So
the state always matches the committed global vector; a round replayed after a crash applies
to the state of its start again. The identity has no state (`state()` is None) and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


class ServerUpdate:
    """g' = c (the base class is the identity: plain FedAvg and the robust combiners)."""

    name = "identity"

    def apply(self, global_vector: np.ndarray, combined: np.ndarray) -> np.ndarray:
        """The next global vector (float32, length P) from this round's global and combined vectors."""
        return combined

    def state(self) -> Mapping[str, np.ndarray] | None:
        """The durable state after the last `apply` (None: stateless, nothing is written)."""
        return None

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore what `state()` returned when the round being resumed started."""

    def metrics(self) -> Mapping[str, float]:
        """Figures of the last `apply`, recorded with the round's metrics (none for the identity)."""
        return {}

    def __str__(self) -> str:
        return self.name
