"""One open training round's bookkeeping (who was selected, who reported, by when, its aggregator),
and the global vector a round trains from.

The round engine opens one per attempt chain (a retry keeps the reports and the aggregator) and
drops it at commit; admission and the upload path read it, only the event loop writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedort.coordinator.aggregation import RoundAggregator
from fedort.coordinator.engine.round_metrics import MetricSums


@dataclass(frozen=True)
class GlobalVector:
    """The global vector round `round` trains from, and its sha256 (what FIT tasks announce); with a
    local vector directory also its BLAKE3 (Task.vector_blake3, for co-located devices)."""

    round: int
    vector: np.ndarray
    sha256: bytes
    blake3: bytes = b""


@dataclass
class TrainingRound:
    round: int
    aggregator: RoundAggregator
    attempt: int = 0
    selected: frozenset[str] = frozenset()
    deadline_ms: int = 0
    closing: bool = False  # no new update is accepted once set
    reported: dict[str, int] = field(default_factory=dict)  # client -> num_examples, durable updates only
    pending: set[str] = field(default_factory=set)  # clients whose update is being made durable
    metrics: MetricSums = field(default_factory=MetricSums)
    examples: int = 0
    expected_clients: int | None = None  # privacy: n_exp and population, fixed at open
    population: int = 0

    def record(self, client_id: str, n: int, metrics: Mapping[str, Any]) -> None:
        """Count a durable update of `client_id` over `n` examples."""
        self.metrics.add(metrics, n)
        self.examples += n
        self.reported[client_id] = n

    def complete(self, min_clients: int) -> bool:
        """Every selected client reported (and at least `min_clients` did): close without waiting."""
        return len(self.reported) >= min_clients and self.selected <= set(self.reported)
