"""What an edge client reports: one `RoundReport` per handled task, a `RunSummary` per `EdgeClient.run()`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RoundReport:
    """What one handled task did (the CLI prints one line per report)."""

    round: int
    kind: str  # "fit" | "evaluate"
    num_examples: int
    metrics: Mapping[str, float]
    seconds: float
    outcome: str  # "accepted" | "duplicate" | "stale" | "rejected"
    vector_cached: bool = False
    message: str = ""
    codec: str = ""  # fit: the update codec used
    bytes_up: int = 0  # fit: vector bytes uploaded (the encoded payload)
    bytes_down: int = 0  # global vector bytes downloaded for this task (0: it was cached)


@dataclass
class RunSummary:
    """The outcome of `EdgeClient.run()`."""

    client_id: str
    model_id: str
    outcome: str  # "done" | "failed" (the coordinator ended the run FAILED) | "stopped"
    reports: list[RoundReport] = field(default_factory=list)
    stop_reason: str = ""

    @property
    def rounds_trained(self) -> list[int]:
        return [r.round for r in self.reports if r.kind == "fit" and r.outcome in ("accepted", "duplicate")]
