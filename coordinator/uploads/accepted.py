"""The tail both update intakes share: a received update's submission row, then counting it and what to fold.

    received ──▶ Accepted.of(header, round, spool path) ──▶ (made durable by the intake) ──▶ count() ──▶ Update

The synchronous intake makes the row durable in a group commit (`arrival_commit`), the asynchronous
one directly, each under its own rules; what the row holds, what counting records in the open
round (reports, examples, metrics, received bytes) and the `Update` the aggregator folds are the same.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedort.common import digests
from fedort.coordinator.aggregation import Update
from fedort.coordinator.engine.round_metrics import metrics_json
from fedort.coordinator.engine.training_round import TrainingRound
from fedort.coordinator.rpc.monitoring import Monitoring
from fedort.coordinator.state.layout import StateLayout
from fedort.coordinator.state.schema import SubmissionRow
from fedort.coordinator.state.store import now_ms
from fedort.protos.messages import SubmitResult, UpdateHeader


@dataclass(frozen=True)
class Accepted:
    """A received update of `round` whose spool file is `path`: its row, and what counting it records."""

    row: SubmissionRow
    path: Path
    metrics: dict[str, Any]
    nbytes: int

    @classmethod
    def of(
        cls, h: UpdateHeader, round: int, path: Path, layout: StateLayout, nbytes: int, payload: bytes | None = None
    ) -> Accepted:
        """The row of `h`'s update for `round` (`payload`: its bytes, when the row itself makes it durable)."""
        metrics = metrics_json(h.metrics)
        row = SubmissionRow(
            round,
            h.client_id,
            h.num_examples,
            metrics,
            digests.stored(h.vector.digest, h.vector.sha256),
            layout.relative(path),
            now_ms(),
            h.vector.codec or "raw",
            payload,
        )
        return cls(row, path, metrics, nbytes)

    def count(self, r: TrainingRound, bytes_received: dict[int, int]) -> Update:
        """Count the durable update in the open round `r` (and its payload bytes); the `Update` to fold."""
        row = self.row
        r.record(row.client_id, row.num_examples, self.metrics)
        bytes_received[row.round] = bytes_received.get(row.round, 0) + self.nbytes
        inline = None if row.payload is None else np.frombuffer(row.payload, np.uint8)
        return Update(row.client_id, row.num_examples, row.codec, self.path, inline)


async def drained_duplicate(chunks: AsyncIterator[bytes], round: int, monitor: Monitoring) -> SubmitResult:
    """The answer to an update already counted, once its stream is read to the end."""
    async for _ in chunks:
        pass
    monitor.update_accepted(duplicate=True)
    return SubmitResult(True, True, round, "duplicate: this update was already counted")
