"""The evaluation phase: after the last round, selected clients evaluate the final model on their data.

A fraction `fraction_evaluate` of the available clients (at least one) is selected, seeded by
(seed, rounds + 1); the phase ends when all of them reported or at the round deadline, and the
example-weighted means of their metrics are recorded in the state database's meta table.
Evaluations are durable as they arrive, so a restart resumes with the ones already counted.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fedort.common.errors import ProtocolError, StaleRoundError
from fedort.common.invariants import present
from fedort.common.round_state import RoundState
from fedort.coordinator.engine.round_metrics import MetricSums, metrics_json
from fedort.coordinator.engine.selection import client_seed, select_clients
from fedort.coordinator.state.storage import retry_when_full
from fedort.coordinator.state.store import now_ms
from fedort.coordinator.uploads.admission import check_model
from fedort.protos.messages import Metric, SubmitResult, Task, TaskKind, TrainConfig

if TYPE_CHECKING:
    from fedort.coordinator.engine.round_engine import RoundEngine

log = logging.getLogger(__name__)


class EvaluationPhase:
    def __init__(self, engine: RoundEngine) -> None:
        self.engine = engine
        self.round = engine.config.plan.rounds + 1
        self.selected: frozenset[str] = frozenset()
        self.reported: dict[str, int] = {}

    def finished(self) -> bool:
        """Nothing (more) to evaluate: disabled, or the summary is already recorded."""
        e = self.engine
        return e.config.plan.fraction_evaluate <= 0 or e.store.get_meta("evaluated_round") == str(self.round)

    async def run(self) -> None:
        e, cfg = self.engine, self.engine.config
        if self.finished():
            return
        self.reported = {c: n for c, n, _ in e.store.evaluations(self.round)}
        available = [c for c in e.registry.available() if c not in self.reported]
        k = min(len(available), max(1, math.ceil(cfg.plan.fraction_evaluate * len(available))))
        self.selected = frozenset(select_clients(available, k, cfg.plan.seed, self.round, 0))
        if not self.selected and not self.reported:
            log.warning("no clients available to evaluate the final model; skipping federated evaluation")
            return
        e.deadline_ms = now_ms() + int(cfg.plan.round_timeout_s * 1000)
        e.transition(RoundState.EVALUATING, f"{len(self.selected)} clients evaluate the final model")
        while not self.selected <= set(self.reported) and (remaining := e.deadline_ms - now_ms()) > 0:
            await e.wait_change(remaining / 1000)
        sums = MetricSums()
        rows = e.store.evaluations(self.round)
        for _, n, metrics in rows:
            sums.add(metrics, n)
        summary = {"clients": len(rows), "examples": sum(n for _, n, _ in rows), "metrics": sums.means()}
        log.info("federated evaluation of the final model: %s", summary)
        await retry_when_full(
            lambda: e.store.set_meta(
                evaluated_round=str(self.round),  # disk full: wait, not fail
                federated_evaluation=json.dumps(summary, sort_keys=True),
            ),
            "federated evaluation summary",
        )

    def task_for(self, client_id: str) -> Task | None:
        """An EVALUATE task while the phase runs, for a selected client that has not reported."""
        e = self.engine
        if e.state is not RoundState.EVALUATING or client_id not in self.selected or client_id in self.reported:
            return None
        g = present(e.global_vector, "the global vector")
        return Task(
            TaskKind.EVALUATE,
            self.round,
            e.deadline_ms,
            TrainConfig(
                batch_size=e.config.training.batch_size, seed=client_seed(e.config.plan.seed, self.round, client_id)
            ),
            0,
            g.sha256,
            e.length,
            vector_blake3=g.blake3,
        )

    def submit(
        self, client_id: str, model_id: str, round: int, num_examples: int, metrics: Mapping[str, Metric]
    ) -> SubmitResult:
        e = self.engine
        e.touch(client_id)
        check_model(model_id, e.model_id)
        if e.state is not RoundState.EVALUATING or round != self.round:
            raise StaleRoundError(
                f"round {round} is not open for evaluation; "
                + (
                    f"the evaluated round is {self.round}"
                    if e.state is RoundState.EVALUATING
                    else f"no evaluation is open (state {e.state.name})"
                )
            )
        if client_id not in self.selected:
            raise StaleRoundError(f"client {client_id} was not selected to evaluate round {round}")
        if client_id in self.reported:
            return SubmitResult(True, True, round, "duplicate: already counted")
        if not 1 <= num_examples <= e.config.uploads.max_examples:
            raise ProtocolError(f"num_examples must be in 1..{e.config.uploads.max_examples}, got {num_examples}")
        e.store.add_evaluation(round, client_id, num_examples, metrics_json(metrics))
        self.reported[client_id] = num_examples
        e.notify()
        return SubmitResult(True, False, round, "accepted")
