"""A trained update the coordinator has not acknowledged yet (kept across retries; for top-k also across a restart)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedort.edge_client.uploads.update_codec import EncodedUpdate
from fedort.protos.messages import Metric, Task


@dataclass
class Pending:
    """A trained update not yet acknowledged by the coordinator."""

    round: int
    update: EncodedUpdate | None
    num_examples: int
    metrics: dict[str, Metric]
    seconds: float
    vector_cached: bool
    secagg: tuple[Task, np.ndarray, np.ndarray] | None = None  # (task, global, trained): masked in upload()


__all__ = ["Pending"]
