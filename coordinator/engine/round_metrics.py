"""Round metrics: client metrics marked sync_dist, averaged across clients weighted by num_examples
(a round keeps at most `metric_limits.MAX_ROUND_METRICS` of them)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fedort.coordinator.uploads.metric_limits import kept_names
from fedort.protos.messages import Metric


@dataclass
class MetricSums:
    """Σ value·n and Σ n per sync_dist metric: their ratio is the example-weighted mean across clients."""

    sums: dict[str, list[float]] = field(default_factory=dict)

    def add(self, metrics: Mapping[str, Any], n: int) -> None:
        """Fold one client's metrics (Metric values or their JSON form) reported over `n` examples."""
        for name, m in metrics.items():
            value, sync = (m.value, m.sync_dist) if isinstance(m, Metric) else (m["value"], m["sync_dist"])
            if sync and math.isfinite(value):
                acc = self.sums.setdefault(name, [0.0, 0.0])
                acc[0] += value * n
                acc[1] += n

    def means(self) -> dict[str, float]:
        """The example-weighted means, of at most MAX_ROUND_METRICS names (those reported over the most examples)."""
        keep = kept_names({k: w for k, (_, w) in self.sums.items() if w > 0})
        return {k: s / w for k, (s, w) in sorted(self.sums.items()) if k in keep}


def metrics_json(metrics: Mapping[str, Metric]) -> dict[str, Any]:
    """The stored form of a client's metrics: name -> {"value", "sync_dist"}."""
    return {k: {"value": float(m.value), "sync_dist": bool(m.sync_dist)} for k, m in metrics.items()}
