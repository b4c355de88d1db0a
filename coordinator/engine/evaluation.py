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
from typing import Protocol

from fedort.common.errors import ProtocolError, StaleRoundError
from fedort.common.invariants import present
from fedort.common.round_state import RoundState
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.engine.registry import ClientRegistry
from fedort.coordinator.engine.round_metrics import MetricSums, metrics_json
from fedort.coordinator.engine.run_view import RunView
from fedort.coordinator.engine.selection import client_seed, select_clients
from fedort.coordinator.state.storage import retry_when_full
from fedort.coordinator.state.store import StateStore, now_ms
from fedort.coordinator.uploads.admission import check_model
from fedort.protos.messages import Metric, SubmitResult, Task, TaskKind, TrainConfig

log = logging.getLogger(__name__)


class EvaluatedRun(RunView, Protocol):
    """The run the phase follows, and the transition into EVALUATING it makes."""

    def transition(self, new: RoundState, why: str = "") -> None: ...


class EvaluationPhase:
    """The final model's evaluation: who evaluates, the reports so far, the deadline, the summary."""

    def __init__(
        self,
        run: EvaluatedRun,
        *,
        config: CoordinatorConfig,
        store: StateStore,
        registry: ClientRegistry,
        model_id: str,
        length: int,
    ) -> None:
        self.view = run
        self.config, self.store, self.registry = config, store, registry
        self.model_id, self.length = model_id, length
        self.round = config.plan.rounds + 1
        self.selected: frozenset[str] = frozenset()
        self.reported: dict[str, int] = {}
        self.deadline_ms = 0  # set when the phase starts

    def finished(self) -> bool:
        """Nothing (more) to evaluate: disabled, or the summary is already recorded."""
        return self.config.plan.fraction_evaluate <= 0 or self.store.get_meta("evaluated_round") == str(self.round)

    async def run(self) -> None:
        e, cfg, store = self.view, self.config, self.store
        if self.finished():
            return
        self.reported = {c: n for c, n, _ in store.evaluations(self.round)}
        available = [c for c in self.registry.available() if c not in self.reported]
        k = min(len(available), max(1, math.ceil(cfg.plan.fraction_evaluate * len(available))))
        self.selected = frozenset(select_clients(available, k, cfg.plan.seed, self.round, 0))
        if not self.selected and not self.reported:
            log.warning("no clients available to evaluate the final model; skipping federated evaluation")
            return
        self.deadline_ms = now_ms() + int(cfg.plan.round_timeout_s * 1000)
        e.transition(RoundState.EVALUATING, f"{len(self.selected)} clients evaluate the final model")
        while not self.selected <= set(self.reported) and (remaining := self.deadline_ms - now_ms()) > 0:
            await e.wait_change(remaining / 1000)
        sums = MetricSums()
        rows = store.evaluations(self.round)
        for _, n, metrics in rows:
            sums.add(metrics, n)
        summary = {"clients": len(rows), "examples": sum(n for _, n, _ in rows), "metrics": sums.means()}
        log.info("federated evaluation of the final model: %s", summary)
        await retry_when_full(
            lambda: store.set_meta(
                evaluated_round=str(self.round),  # disk full: wait, not fail
                federated_evaluation=json.dumps(summary, sort_keys=True),
            ),
            "federated evaluation summary",
        )

    def task_for(self, client_id: str) -> Task | None:
        """An EVALUATE task while the phase runs, for a selected client that has not reported."""
        e = self.view
        if e.state is not RoundState.EVALUATING or client_id not in self.selected or client_id in self.reported:
            return None
        g = present(e.global_vector, "the global vector")
        return Task(
            TaskKind.EVALUATE,
            self.round,
            self.deadline_ms,
            TrainConfig(
                batch_size=self.config.training.batch_size,
                seed=client_seed(self.config.plan.seed, self.round, client_id),
            ),
            0,
            g.sha256,
            self.length,
            vector_blake3=g.blake3,
        )

    def submit(
        self, client_id: str, model_id: str, round: int, num_examples: int, metrics: Mapping[str, Metric]
    ) -> SubmitResult:
        e = self.view
        self.registry.touch(client_id)
        check_model(model_id, self.model_id)
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
        if not 1 <= num_examples <= self.config.uploads.max_examples:
            raise ProtocolError(f"num_examples must be in 1..{self.config.uploads.max_examples}, got {num_examples}")
        self.store.add_evaluation(round, client_id, num_examples, metrics_json(metrics))
        self.reported[client_id] = num_examples
        e.notify()
        return SubmitResult(True, False, round, "accepted")
