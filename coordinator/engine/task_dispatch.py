"""What the round engine answers clients: tasks (long-poll), global vectors, evaluations, joins, status.

`TaskDispatch` holds the engine's calls for the servicer, one call per RPC, on plain values; it reads
the run through a `RunView` and asks a `FitRule` who may train now and by when: the synchronous
rounds' selection (`SelectedClients`) or the asynchronous mode's any-client rule (`fedbuff.engine`).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Mapping
from typing import Protocol

from fedort.common.errors import NotFoundError, ProtocolError
from fedort.common.invariants import present
from fedort.common.round_state import RoundState
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.engine.evaluation import EvaluationPhase
from fedort.coordinator.engine.registry import ClientRegistry
from fedort.coordinator.engine.run_view import RunView
from fedort.coordinator.engine.selection import client_seed
from fedort.coordinator.engine.training_round import GlobalVector
from fedort.coordinator.state.integrity import read_verified_vector
from fedort.coordinator.state.store import StateStore
from fedort.coordinator.status import snapshot
from fedort.coordinator.uploads.admission import check_model
from fedort.protos.messages import Metric, Status, SubmitResult, Task, TaskKind, TrainConfig

log = logging.getLogger("fedort.coordinator.engine.round_engine")

MAX_POLL_MS = 30_000
MAX_POLL_IDS = 10_000  # client ids per PollTasks call


#: (round, sha256 hex) -> an old round's global vector while some download holds it (then it is freed)
_OLD_VECTORS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


class SecureTasks(Protocol):
    """What a FIT task needs of a secure-aggregation round (`privacy.secagg.secure_round.SecAggRound`)."""

    def may_fit(self, client_id: str) -> bool: ...

    def task_bytes(self) -> bytes: ...


class FitRule(Protocol):
    """Who gets a FIT task while the run is TRAINING, and the deadline that task names."""

    def may_fit(self, client_id: str) -> bool: ...

    def deadline_ms(self) -> int: ...

    def candidates(self) -> frozenset[str] | None:
        """The clients that may get a FIT task now (None: any active client)."""
        ...


class SelectedClients:
    """The synchronous rounds' rule: a client selected for the open attempt that has not reported yet."""

    def __init__(self, run: RunView, secagg: SecureTasks | None = None) -> None:
        self.run = run
        self.secagg = secagg

    def may_fit(self, client_id: str) -> bool:
        r = self.run.training
        return (
            self.run.state is RoundState.TRAINING
            and r is not None
            and not r.closing
            and client_id in r.selected
            and client_id not in r.reported
            and client_id not in r.pending
            and (self.secagg is None or self.secagg.may_fit(client_id))
        )

    def deadline_ms(self) -> int:
        return present(self.run.training, "the open round").deadline_ms

    def candidates(self) -> frozenset[str] | None:
        return present(self.run.training, "the open round").selected


class TaskDispatch:
    """Client-facing calls of the round engine, over the run it reads through `run`."""

    def __init__(
        self,
        run: RunView,
        *,
        config: CoordinatorConfig,
        store: StateStore,
        registry: ClientRegistry,
        evaluation: EvaluationPhase,
        model_id: str,
        length: int,
        fit: FitRule,
        secagg: SecureTasks | None = None,
    ) -> None:
        self.run = run
        self.config = config
        self.store = store
        self.registry = registry
        self.evaluation = evaluation
        self.model_id = model_id
        self.length = length
        self.fit = fit
        self.secagg = secagg
        self.released: set[str] = set()  # clients told DONE
        self.told: set[str] = set()  # of those, clients that then asked the run's outcome (Status)

    def touch(self, client_id: str) -> None:
        self.registry.touch(client_id)

    def check_model(self, model_id: str) -> None:
        check_model(model_id, self.model_id)

    def task_now(self, client_id: str) -> Task | None:
        """The client's task at this moment (None: nothing yet, wait for a change)."""
        if self.run.state.final:
            self.released.add(client_id)
            return Task(TaskKind.DONE, round=self.run.round)
        if not self.registry.is_active(client_id):
            return None
        if self.fit.may_fit(client_id):
            cfg = self.config
            train = TrainConfig(
                cfg.training.local_epochs,
                cfg.training.batch_size,
                cfg.training.lr,
                cfg.training.reset_optimizer,
                client_seed(cfg.plan.seed, self.run.round, client_id),
                dict(cfg.extra),
                cfg.training.prox_mu,
            )
            g = present(self.run.global_vector, "the global vector")
            return Task(
                TaskKind.FIT,
                self.run.round,
                self.fit.deadline_ms(),
                train,
                0,
                g.sha256,
                self.length,
                self.secagg.task_bytes() if self.secagg is not None else b"",
                g.blake3,
            )
        return self.evaluation.task_for(client_id)

    async def poll(self, client_id: str, model_id: str, wait_ms: int) -> Task:
        """The client's next task, holding the call up to min(wait_ms, 30 s) while there is none."""
        self.touch(client_id)
        self.check_model(model_id)
        wait = min(max(wait_ms, 0), MAX_POLL_MS) / 1000
        until = time.monotonic() + wait
        while True:
            task = self.task_now(client_id)
            if task is not None:
                self.registry.touch(client_id)
                return task
            remaining = until - time.monotonic()
            if remaining <= 0 or self.run.stopping:
                self.registry.touch(client_id)
                retry_ms = 1000 if wait <= 0 or self.run.stopping else 0
                return Task(TaskKind.WAIT, self.run.round, retry_after_ms=retry_ms)
            await self.run.wait_change(remaining)

    async def poll_many(
        self, client_ids: list[str], model_id: str, wait_ms: int
    ) -> tuple[int, RoundState, dict[str, Task]]:
        """PollTask for many clients in one call: (round, state, the clients whose task is not WAIT).

        Held up to min(wait_ms, 30 s) while none of them has work; the clients omitted WAIT. One
        call instead of one per client is what lets a simulation worker host many idle clients.
        """
        if len(client_ids) > MAX_POLL_IDS:
            raise ProtocolError(f"PollTasks names {len(client_ids)} clients; at most {MAX_POLL_IDS} per call")
        self.check_model(model_id)
        ids = list(dict.fromkeys(client_ids))
        for cid in ids:
            self.touch(cid)
        until = time.monotonic() + min(max(wait_ms, 0), MAX_POLL_MS) / 1000
        while True:  # woken by every upload: look only at listed clients that can have work now
            can = self.may_have_work()
            tasks = {
                cid: t
                for cid in (ids if can is None else [c for c in ids if c in can])
                if (t := self.task_now(cid)) is not None and t.kind != TaskKind.WAIT
            }
            if tasks or self.run.stopping or time.monotonic() >= until:
                return self.run.round, self.run.state, tasks
            await self.run.wait_change(until - time.monotonic())

    def may_have_work(self) -> frozenset[str] | set[str] | None:
        """The clients `task_now` may give a task other than WAIT (None: any client: the run is over, or the
        fit rule names none)."""
        if self.run.state.final:
            return None
        if self.run.state is RoundState.TRAINING and self.run.training is not None:
            return self.fit.candidates()
        if self.run.state is RoundState.EVALUATING:
            return self.evaluation.selected
        return frozenset()

    def vector_for(self, client_id: str, model_id: str, round: int) -> GlobalVector:
        """The global vector round `round` trains from (NOT_FOUND for a round not open yet)."""
        self.touch(client_id)
        self.check_model(model_id)
        g = self.run.global_vector
        if g is not None and round == g.round:
            return g
        if g is None or round < 1 or round > g.round:
            latest = g.round if g else 0
            raise NotFoundError(f"no global vector for round {round} yet; the latest round is {latest}")
        rows = {r.round: r for r in self.store.rounds()}
        expected = self.store.get_meta("initial_vector_sha256") if round == 1 else rows[round - 1].vector_sha256
        expected = present(expected, f"the recorded sha256 of round {round}'s global vector")
        # an old round's vector is read once and shared by every download of it in progress (not one copy each)
        key = (round, expected)
        vector = _OLD_VECTORS.get(key)
        if vector is None:
            vector = read_verified_vector(self.store.vector_path(round), self.length, expected)
            vector.flags.writeable = False
            _OLD_VECTORS[key] = vector
        return GlobalVector(round, vector, bytes.fromhex(expected))

    def submit_evaluation(
        self, client_id: str, model_id: str, round: int, num_examples: int, metrics: Mapping[str, Metric]
    ) -> SubmitResult:
        return self.evaluation.submit(client_id, model_id, round, num_examples, metrics)

    def join(self, client_id: str, device_name: str, capabilities: Mapping[str, str], enrolled: bool = False) -> str:
        cid = self.registry.join(client_id, device_name, capabilities, enrolled)
        log.info("client %s joined (%s)", cid, device_name or "unnamed device")
        return cid

    def leave(self, client_id: str, reason: str) -> None:
        self.registry.leave(client_id, reason)
        log.info("client %s left%s", client_id, f": {reason}" if reason else "")

    def all_released(self) -> bool:
        """True once every available client has been told DONE."""
        return set(self.registry.available()) <= self.released

    def outcome_asked(self, client_id: str) -> None:
        """A released client asked the run's outcome (a Status call naming it)."""
        if self.run.state.final and client_id in self.released:
            self.told.add(client_id)

    def all_told(self) -> bool:
        """True once every available client has been told DONE and has asked whether the run succeeded
        (the server may then stop: no device is left to learn the outcome)."""
        return set(self.registry.available()) <= self.told

    def heartbeat(self, client_id: str) -> tuple[int, RoundState]:
        self.touch(client_id)
        return self.run.round, self.run.state

    def status(self) -> Status:
        return snapshot(
            self.store,
            current_round=self.run.round,
            total_rounds=self.config.plan.rounds,
            state=self.run.state,
            registered=len(self.registry),
            active=self.registry.active_count(),
        )
