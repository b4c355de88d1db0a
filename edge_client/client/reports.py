"""What an edge client reports: one `RoundReport` per handled task, a `RunSummary` per `EdgeClient.run()`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

log = logging.getLogger("fedort.edge")


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


class ReportLog:
    """One client's reports in order: each is logged and handed to `on_report` (if any) as it is added."""

    def __init__(self, on_report: Callable[[RoundReport], None] | None = None) -> None:
        self.reports: list[RoundReport] = []
        self._on_report = on_report

    def add(self, report: RoundReport) -> RoundReport:
        self.reports.append(report)
        # with an on_report callback (the CLI prints each round) the log line would say it a second time
        (log.debug if self._on_report is not None else log.info)(
            "round %d %s: %d examples, %.2f s, %s%s",
            report.round,
            report.kind,
            report.num_examples,
            report.seconds,
            report.outcome,
            f" ({report.message})" if report.message and report.message != report.outcome else "",
        )
        if self._on_report is not None:
            self._on_report(report)
        return report
