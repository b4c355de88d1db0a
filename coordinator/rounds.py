"""The round engine: one explicit state machine that runs the federated rounds.

    WAITING_FOR_CLIENTS --> TRAINING --> AGGREGATING --> EXPORTING --> WAITING_FOR_CLIENTS (next round)
                               |  ^                          |------> EVALUATING --> DONE
                               +--+ retry (attempt + 1)      +------> DONE
    any state --> FAILED (a round without quorum after max_round_attempts, or an unplanned error)

A round opens once `min_available_clients` are available; it selects
max(min_clients, ceil(fraction * available)) of them (capped at what is available), seeded by
(seed, round, attempt) over the sorted client ids. It closes as soon as every selected client
reported (and at least min_clients did), or at its deadline if at least min_clients did;
otherwise it is retried among available clients that have not reported, with a new deadline, up
to max_round_attempts, and then the run FAILS with a message saying why: a round never hangs.

Accepted updates are made durable (spool file, then SQLite row) and only then folded into a
float64 `WeightedSum`, so memory is O(P) whatever the number of clients and a restart can
replay exactly the acknowledged updates. A robust strategy that needs all of a round's updates
(median, trimmed mean, Krum: `coordinator.strategies`) skips the sum and aggregates the round's
spool files at close. Everything here runs on the event loop; file writes and exports go to a
worker thread.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import json
import logging
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.export import Exporter
from fedort.coordinator.fedavg import WeightedSum
from fedort.coordinator.integrity import export_problem, read_verified_vector
from fedort.coordinator.strategies import SpooledUpdate, parse_strategy
from fedort.coordinator.metrics import MetricSums, metrics_json
from fedort.coordinator.registry import ClientRegistry
from fedort.coordinator.selection import client_seed, sample_size, select_clients
from fedort.coordinator.status import StatusSnapshot, snapshot
from fedort.coordinator.storage import retry_when_full
from fedort.coordinator.state import (
    COMMITTED, EXPORTED, FAILED, OPEN, StateStore, SubmissionRow, atomic_write, fsync_dir, now_ms,
)
from fedort.protos.codec import CODEC_RAW, DTYPES, VectorAssembler
from fedort.protos.errors import (
    FedortError, NotFoundError, ProtocolError, ResourceExhaustedError, StaleRoundError,
    UnavailableError, VectorError, WrongModelError,
)
from fedort.protos.messages import Metric, SubmitResult, Task, TaskKind, TrainConfig, UpdateHeader

log = logging.getLogger(__name__)

MAX_POLL_MS = 30_000
MAX_CONCURRENT_UPLOADS = 4     # updates assembled in memory at once ...
FOLD_QUEUE = 2                 # ... plus acknowledged updates waiting to be folded: memory stays O(P)


class RoundState(enum.Enum):
    WAITING_FOR_CLIENTS = "WAITING_FOR_CLIENTS"
    TRAINING = "TRAINING"
    AGGREGATING = "AGGREGATING"
    EXPORTING = "EXPORTING"
    EVALUATING = "EVALUATING"
    DONE = "DONE"
    FAILED = "FAILED"


S = RoundState
_ALLOWED: dict[RoundState, frozenset[RoundState]] = {
    S.WAITING_FOR_CLIENTS: frozenset({S.TRAINING, S.EVALUATING, S.DONE, S.FAILED}),
    S.TRAINING: frozenset({S.TRAINING, S.AGGREGATING, S.FAILED}),
    S.AGGREGATING: frozenset({S.EXPORTING, S.FAILED}),
    S.EXPORTING: frozenset({S.WAITING_FOR_CLIENTS, S.EVALUATING, S.DONE, S.FAILED}),
    S.EVALUATING: frozenset({S.DONE, S.FAILED}),
    S.DONE: frozenset(),
    S.FAILED: frozenset(),
}


class IllegalTransition(FedortError):
    """The engine was asked to move between states the life cycle does not connect (a bug)."""


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: DONE or FAILED, after how many committed rounds, and why."""

    state: RoundState
    rounds_completed: int
    message: str = ""


@dataclass(frozen=True)
class GlobalVector:
    round: int
    vector: np.ndarray
    sha256: bytes


# ---- the engine ---------------------------------------------------------------------------------

class RoundEngine:
    """Runs rounds 1..config.rounds over the clients in `registry`, durably in `store`."""

    def __init__(self, config: CoordinatorConfig, store: StateStore, exporter: Exporter) -> None:
        self.config = config
        self.store = store
        self.exporter = exporter
        self.manifest = exporter.manifest
        self.model_id = self.manifest.model_id
        self.length = self.manifest.parameter_count
        self.registry = ClientRegistry(store, config.client_timeout_s, on_change=self.notify)
        self.state = RoundState.WAITING_FOR_CLIENTS
        self.round = 1
        self.attempt = 0
        self.selected: frozenset[str] = frozenset()
        self.deadline_ms = 0
        self._reported: dict[str, int] = {}
        self._pending: set[str] = set()
        self._closing = False
        self._sum = WeightedSum(self.length, np.dtype(np.float64))
        self._sum.total.fill(0)   # touch every page now, at start, not during the first fold
        self.strategy = parse_strategy(config.strategy)
        self._metrics = MetricSums()
        self._examples = 0
        self._global: GlobalVector | None = None
        self._eval_round = config.rounds + 1
        self._eval_selected: frozenset[str] = frozenset()
        self._eval_reported: dict[str, int] = {}
        self._changed = asyncio.Event()
        self._finished = asyncio.Event()
        self._outcome: RunOutcome | None = None
        self._upload_slots = asyncio.Semaphore(MAX_CONCURRENT_UPLOADS)
        self._released: set[str] = set()   # clients told DONE
        self._recovered = self._resumed = False
        self._stopping = False
        self._fold_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedort-fold")
        self._fold_slots = asyncio.Semaphore(FOLD_QUEUE)
        self._folds: set[asyncio.Future] = set()
        self._fold_error: BaseException | None = None
        self._temp_counter = 0

    # ---- state machine ------------------------------------------------------------------------

    def _transition(self, new: RoundState, why: str = "") -> None:
        if new not in _ALLOWED[self.state]:
            raise IllegalTransition(f"illegal round transition from {self.state.name} to {new.name} (round {self.round})")
        log.info("round %d: %s -> %s%s", self.round, self.state.name, new.name, f" ({why})" if why else "")
        self.state = new
        self.notify()

    def notify(self) -> None:
        """Wake every long-poll and the engine loop: something changed."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_change(self, timeout: float) -> None:
        """Until the next notify() or `timeout` s, whichever comes first.

        Not `asyncio.wait_for`: before Python 3.12 it can swallow a cancellation that arrives just
        as the event fires, which left a cancelled engine loop waiting out a whole round deadline.
        """
        waiter = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({waiter}, timeout=max(0.0, timeout))
        finally:
            waiter.cancel()

    @property
    def outcome(self) -> RunOutcome | None:
        return self._outcome

    async def wait_done(self) -> RunOutcome:
        await self._finished.wait()
        assert self._outcome is not None
        return self._outcome

    def _finish(self, state: RoundState, message: str) -> None:
        if state is RoundState.FAILED:
            log.error("run failed: %s", message)
        self._transition(state, message)
        done = sum(1 for r in self.store.rounds() if r.state in (COMMITTED, EXPORTED))
        self._outcome = RunOutcome(state, done, message)
        self._finished.set()

    # ---- main loop ----------------------------------------------------------------------------

    async def run(self) -> RunOutcome:
        """Recover from the state dir, then run every remaining round, evaluation, DONE (or FAILED)."""
        try:
            resumed = self._resumed if self._recovered else await self.recover()
            if self._finished.is_set():
                return self._outcome
            while self.round <= self.config.rounds:
                if not resumed:
                    await self._wait_for_clients()
                    await retry_when_full(lambda: self._open(attempt=1, keep=frozenset()), f"round {self.round} open")
                resumed = False
                if not await self._train():
                    return self._outcome
                await retry_when_full(self._commit, f"round {self.round} commit")   # disk full: wait, not die
                await retry_when_full(lambda: self._export(self.round - 1), f"round {self.round - 1} export")
                if self.round <= self.config.rounds:
                    self._transition(RoundState.WAITING_FOR_CLIENTS, f"round {self.round} is next")
            await self._evaluate_phase()
            self.store.set_meta(run_state="DONE")
            self._finish(RoundState.DONE, f"{self.config.rounds} rounds completed")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # an unplanned error must end the run visibly, not hang it
            log.exception("round engine stopped by an error")
            message = f"round {self.round}: {type(e).__name__}: {e}"
            try:
                self.store.fail_round(self.round, message)
            except Exception as record_error:  # noqa: BLE001 - e.g. disk full: the run still ends FAILED in memory
                log.error("could not record the failure in %s: %s", self.store.dir, record_error)
            finally:
                self.state = RoundState.FAILED
                self._outcome = RunOutcome(RoundState.FAILED, self.round - 1, message)
                self._finished.set()
                self.notify()
        return self._outcome

    async def _wait_for_clients(self) -> None:
        need = self.config.min_available_clients
        last_log = 0.0
        while (n := len(self.registry.available())) < need:
            if time.monotonic() - last_log > 30:
                log.info("round %d: waiting for clients: %d of %d available", self.round, n, need)
                last_log = time.monotonic()
            await self._wait_change(1.0)

    def _open(self, attempt: int, keep: frozenset[str]) -> None:
        """Select clients (besides those in `keep`, which already reported) and open an attempt."""
        cfg = self.config
        available = set(self.registry.available())
        candidates = sorted(available - set(self._reported))
        target = sample_size(len(available | set(self._reported)), cfg.fraction, cfg.min_clients)
        k = max(0, min(target - len(keep), len(candidates)))
        chosen = select_clients(candidates, k, cfg.seed, self.round, attempt)
        self.attempt = attempt
        self.selected = frozenset(chosen) | keep
        self.deadline_ms = now_ms() + int(cfg.round_timeout_s * 1000)
        self._closing = False
        self.store.open_round(self.round, attempt, self.selected, self.deadline_ms)
        why = (f"attempt {attempt}/{cfg.max_round_attempts}: selected {len(chosen)} of {len(candidates)} "
               f"available clients" + (f", keeping {len(keep)} that reported" if keep else "")
               + f", deadline in {cfg.round_timeout_s:g} s")
        self._transition(RoundState.TRAINING, why)

    def _complete(self) -> bool:
        return len(self._reported) >= self.config.min_clients and self.selected <= set(self._reported)

    async def _train(self) -> bool:
        """Wait for the open round to close, retrying it as needed; False if the run failed."""
        cfg = self.config
        while True:
            while not self._complete() and (remaining := self.deadline_ms - now_ms()) > 0:
                await self._wait_change(remaining / 1000)
            self._closing = True          # no new update is accepted from here on ...
            while self._pending or self._folds:   # ... but those being stored or folded are counted
                await self._wait_change(1.0)
            if self._fold_error is not None:
                raise self._fold_error
            n = len(self._reported)
            if n >= cfg.min_clients:
                how = "all selected clients reported" if self.selected <= set(self._reported) else "deadline"
                self._transition(RoundState.AGGREGATING, f"{how}: {n} updates, {self._examples} examples")
                return True
            if self.attempt >= cfg.max_round_attempts:
                message = (f"round {self.round} failed: {n} of the required {cfg.min_clients} clients reported after "
                           f"{self.attempt} attempt(s) of {cfg.round_timeout_s:g} s; "
                           f"{len(self.registry.available())} clients available")
                self.store.fail_round(self.round, message)
                self._finish(RoundState.FAILED, message)
                return False
            log.warning("round %d: only %d of %d required updates by the deadline; retrying", self.round, n,
                        cfg.min_clients)
            self._open(self.attempt + 1, keep=frozenset(self._reported))

    async def _commit(self) -> None:
        """Average, write the next round's global vector durably, then mark the round committed."""
        mean = await self._aggregate()
        sha = hashlib.sha256(memoryview(mean).cast("B")).digest()
        await asyncio.to_thread(atomic_write, self.store.vector_path(self.round + 1), mean)
        metrics = self._metrics.means()
        self.store.commit_round(self.round, sha.hex(), len(self._reported), self._examples, metrics)
        log.info("round %d: committed %d updates over %d examples; metrics %s", self.round, len(self._reported),
                 self._examples, {k: round(v, 5) for k, v in metrics.items()})
        self._drop_spool(self.round)
        self._transition(RoundState.EXPORTING, f"global vector of round {self.round + 1} is {sha.hex()[:12]}")
        self.round += 1
        self._global = GlobalVector(self.round, mean, sha)
        self._reset_round()

    def _reset_round(self) -> None:
        self._reported, self._examples, self._metrics = {}, 0, MetricSums()
        # reuse the accumulator: a fresh np.zeros would page-fault all 8*P bytes again inside the
        # first fold of the next round, on an upload's critical path
        self._sum.total.fill(0)
        self._sum.weight, self._sum.count = 0.0, 0
        self.selected, self.attempt, self._closing = frozenset(), 0, False

    def _drop_spool(self, round: int) -> None:
        if self.config.keep_spool:
            return
        spool = self.store.spool_dir(round)
        if spool.is_dir():
            for f in spool.iterdir():
                f.unlink(missing_ok=True)
            spool.rmdir()

    async def _export(self, round: int) -> None:
        row = next(r for r in self.store.rounds() if r.round == round)
        vector = self._global.vector if self._global and self._global.round == round + 1 else \
            read_verified_vector(self.store.vector_path(round + 1), self.length, row.vector_sha256)
        record = {
            "clients": row.clients, "client_ids": [s.client_id for s in self.store.submissions(round)],
            "examples": row.examples, "metrics": row.metrics, "attempts": row.attempt,
            "vector_sha256": row.vector_sha256, "vector": self.store.vector_path(round + 1).name,
            "training_config": self.config.training_json(),
        }
        path = await asyncio.to_thread(self.exporter.export, round, vector, record)
        self.store.mark_exported(round, str(path.relative_to(self.store.dir)))

    # ---- evaluation of the final model --------------------------------------------------------

    async def _evaluate_phase(self) -> None:
        cfg = self.config
        if cfg.fraction_evaluate <= 0 or self.store.get_meta("evaluated_round") == str(self._eval_round):
            return
        self._eval_reported = {c: n for c, n, _ in self.store.evaluations(self._eval_round)}
        available = [c for c in self.registry.available() if c not in self._eval_reported]
        k = min(len(available), max(1, math.ceil(cfg.fraction_evaluate * len(available))))
        self._eval_selected = frozenset(select_clients(available, k, cfg.seed, self._eval_round, 0))
        if not self._eval_selected and not self._eval_reported:
            log.warning("no clients available to evaluate the final model; skipping federated evaluation")
            return
        self.deadline_ms = now_ms() + int(cfg.round_timeout_s * 1000)
        self._transition(RoundState.EVALUATING, f"{len(self._eval_selected)} clients evaluate the final model")
        while not self._eval_selected <= set(self._eval_reported) and (remaining := self.deadline_ms - now_ms()) > 0:
            await self._wait_change(remaining / 1000)
        sums = MetricSums()
        rows = self.store.evaluations(self._eval_round)
        for _, n, metrics in rows:
            sums.add(metrics, n)
        summary = {"clients": len(rows), "examples": sum(n for _, n, _ in rows), "metrics": sums.means()}
        log.info("federated evaluation of the final model: %s", summary)
        self.store.set_meta(evaluated_round=str(self._eval_round), federated_evaluation=json.dumps(summary, sort_keys=True))

    # ---- recovery -----------------------------------------------------------------------------

    async def recover(self) -> bool:
        """Rebuild memory from the state dir (before serving); True if an open round was resumed."""
        self._resumed = await self._recover()
        self._recovered = True
        return self._resumed

    async def _recover(self) -> bool:
        store = self.store
        first = store.vector_path(1)
        sha_hex = store.get_meta("initial_vector_sha256")
        if sha_hex is None:
            vector = self.exporter.initial_vector()
            await asyncio.to_thread(atomic_write, first, vector)
            sha = hashlib.sha256(memoryview(vector).cast("B")).digest()
            store.set_meta(initial_vector_sha256=sha.hex())
        rows = {r.round: r for r in store.rounds()}
        last = 0
        for r in sorted(rows):
            row = rows[r]
            if row.state in (COMMITTED, EXPORTED):
                last = r
                problem = None if row.state == COMMITTED else export_problem(store.model_dir(r), row.vector_sha256)
                if problem:
                    log.warning("round %d: export not intact (%s); exporting it again", r, problem)
                if row.state == COMMITTED or problem:
                    log.info("round %d: redoing the export interrupted by the last stop", r)
                    await self._export(r)
                self._drop_spool(r)
        self.round = last + 1
        expected = store.get_meta("initial_vector_sha256") if last == 0 else rows[last].vector_sha256
        vector = read_verified_vector(store.vector_path(self.round), self.length, expected)
        sha = bytes.fromhex(expected)
        self._global = GlobalVector(self.round, vector, sha)
        if self.round > self.config.rounds:
            log.info("all %d rounds were already committed", last)
            if self.config.fraction_evaluate <= 0 or store.get_meta("evaluated_round") == str(self._eval_round):
                store.set_meta(run_state="DONE")
                self._finish(RoundState.DONE, f"{last} rounds completed")
            return False
        store.set_meta(run_state="RUNNING", run_message="")   # a failed run may be restarted: it retries
        open_row = rows.get(self.round)
        if open_row is None or open_row.state not in (OPEN, FAILED):
            return False
        await self._replay(open_row.round)
        if open_row.state == FAILED:   # its selection failed it: select afresh among the clients still here
            self._open(attempt=1, keep=frozenset(self._reported))
            return True
        attempt = open_row.attempt
        self.selected = frozenset(c for c in open_row.selected if self.registry.is_active(c)) | frozenset(self._reported)
        self.attempt = attempt
        # clients need time to reconnect after a restart: the resumed attempt gets a fresh deadline
        self.deadline_ms = now_ms() + int(self.config.round_timeout_s * 1000)
        store.open_round(self.round, attempt, self.selected, self.deadline_ms)
        self._transition(RoundState.TRAINING, f"resumed attempt {attempt} after a restart with "
                                              f"{len(self._reported)} of {len(self.selected)} updates replayed")
        return True

    async def _replay(self, round: int) -> None:
        """Fold the acknowledged updates of `round` back in, each exactly once; drop orphan spool files."""
        rows = self.store.submissions(round)
        named = {Path(r.spool_path).name for r in rows}
        spool = self.store.spool_dir(round)
        if spool.is_dir():
            for f in spool.iterdir():
                if f.name not in named:
                    f.unlink(missing_ok=True)   # written, never acknowledged: as if it never arrived
        for r in rows:
            path = self.store.dir / r.spool_path
            vector = await asyncio.to_thread(read_verified_vector, path, self.length, r.sha256)
            self._fold(r.client_id, r.num_examples, r.metrics, vector)
        if rows:
            log.info("round %d: replayed %d acknowledged updates from the spool", round, len(rows))

    def _fold(self, client_id: str, n: int, metrics: Mapping[str, Any], vector: np.ndarray) -> None:
        self._add(vector, n)
        self._record(client_id, n, metrics)

    def _add(self, vector: np.ndarray, n: int) -> None:
        """Fold an update into the running sum, as the strategy prepares it (nothing if it reads the spool)."""
        if not self.strategy.needs_all_updates:
            self._sum.add(self.strategy.prepare(vector, self._global.vector), n)

    async def _aggregate(self) -> np.ndarray:
        """The next global vector: the running mean, or the strategy over the round's spooled updates."""
        if not self.strategy.needs_all_updates:
            return self._sum.mean()
        t0 = time.perf_counter()
        updates = [SpooledUpdate(r.client_id, self.store.dir / r.spool_path, r.num_examples)
                   for r in self.store.submissions(self.round)]
        vector = await asyncio.to_thread(self.strategy.aggregate, updates, self._global.vector)
        log.info("round %d: %s aggregated %d spooled updates in %.1f ms", self.round, self.strategy, len(updates),
                 1000 * (time.perf_counter() - t0))
        return vector

    def _record(self, client_id: str, n: int, metrics: Mapping[str, Any]) -> None:
        self._metrics.add(metrics, n)
        self._examples += n
        self._reported[client_id] = n

    # ---- what the servicer asks ----------------------------------------------------------------

    def touch(self, client_id: str) -> None:
        self.registry.touch(client_id)

    def check_model(self, model_id: str) -> None:
        if model_id != self.model_id:
            raise WrongModelError(f"request names model {model_id[:16] or '(none)'}…, this run trains model "
                                  f"{self.model_id[:16]}…")

    def _task_now(self, client_id: str) -> Task | None:
        if self.state in (RoundState.DONE, RoundState.FAILED):
            self._released.add(client_id)
            return Task(TaskKind.DONE, round=self.round)
        if not self.registry.is_active(client_id):
            return None
        g = self._global
        if (self.state is RoundState.TRAINING and not self._closing and client_id in self.selected
                and client_id not in self._reported and client_id not in self._pending):
            cfg = self.config
            train = TrainConfig(cfg.local_epochs, cfg.batch_size, cfg.lr, cfg.reset_optimizer,
                                client_seed(cfg.seed, self.round, client_id), dict(cfg.extra))
            return Task(TaskKind.FIT, self.round, self.deadline_ms, train, 0, g.sha256, self.length)
        if (self.state is RoundState.EVALUATING and client_id in self._eval_selected
                and client_id not in self._eval_reported):
            return Task(TaskKind.EVALUATE, self._eval_round, self.deadline_ms, TrainConfig(
                batch_size=self.config.batch_size, seed=client_seed(self.config.seed, self._eval_round, client_id)),
                0, g.sha256, self.length)
        return None

    async def poll(self, client_id: str, model_id: str, wait_ms: int) -> Task:
        """The client's next task, holding the call up to min(wait_ms, 30 s) while there is none."""
        self.touch(client_id)
        self.check_model(model_id)
        wait = min(max(wait_ms, 0), MAX_POLL_MS) / 1000
        until = time.monotonic() + wait
        while True:
            task = self._task_now(client_id)
            if task is not None:
                self.registry.touch(client_id)
                return task
            remaining = until - time.monotonic()
            if remaining <= 0 or self._stopping:
                self.registry.touch(client_id)
                return Task(TaskKind.WAIT, self.round, retry_after_ms=1000 if wait <= 0 or self._stopping else 0)
            await self._wait_change(remaining)

    def vector_for(self, client_id: str, model_id: str, round: int) -> GlobalVector:
        """The global vector round `round` trains from (NOT_FOUND for a round not open yet)."""
        self.touch(client_id)
        self.check_model(model_id)
        g = self._global
        if g is not None and round == g.round:
            return g
        if g is None or round < 1 or round > g.round:
            latest = g.round if g else 0
            raise NotFoundError(f"no global vector for round {round} yet; the latest round is {latest}")
        rows = {r.round: r for r in self.store.rounds()}
        expected = self.store.get_meta("initial_vector_sha256") if round == 1 else rows[round - 1].vector_sha256
        vector = read_verified_vector(self.store.vector_path(round), self.length, expected)
        return GlobalVector(round, vector, bytes.fromhex(expected))

    def _check_open(self, client_id: str, round: int) -> None:
        if self.state is not RoundState.TRAINING or self._closing:
            raise StaleRoundError(f"round {round} is not open for updates; no round is open now "
                                  f"(state {self.state.name}, round {self.round})")
        if round != self.round:
            raise StaleRoundError(f"round {round} is not open for updates; the open round is {self.round}")
        if client_id not in self.selected:
            raise StaleRoundError(f"client {client_id} was not selected for round {round}; "
                                  f"poll for a task before submitting")

    def begin_update(self, h: UpdateHeader) -> VectorAssembler | None:
        """Check an update's header in protocol order; None means a duplicate (drain and ack)."""
        self.touch(h.client_id)
        self.check_model(h.vector.model_id)
        self._check_open(h.client_id, h.vector.round)
        if h.client_id in self._reported:
            return None
        if h.client_id in self._pending:
            raise UnavailableError(f"an update of client {h.client_id} for round {self.round} is being stored; retry")
        meta, cfg = h.vector, self.config
        if meta.dtype not in DTYPES:
            raise VectorError(f"update dtype must be one of {sorted(DTYPES)}, got {meta.dtype!r}")
        if meta.codec != CODEC_RAW:
            raise VectorError(f"update codec must be {CODEC_RAW!r}, got {meta.codec!r}")
        if meta.length != self.length:
            raise VectorError(f"update must have {self.length} elements for this model, header says {meta.length}")
        if not 1 <= h.num_examples <= cfg.max_examples:
            raise ProtocolError(f"num_examples must be in 1..{cfg.max_examples}, got {h.num_examples}")
        if meta.length > cfg.max_vector_length:
            raise ResourceExhaustedError(f"vector of {meta.length} elements exceeds the limit of {cfg.max_vector_length}")
        return VectorAssembler(meta, expected_length=self.length, max_length=cfg.max_vector_length,
                               max_chunk_bytes=cfg.max_chunk_bytes)

    def upload_slot(self) -> asyncio.Semaphore:
        """Held while an update is assembled in memory: bounds memory under many concurrent uploads."""
        return self._upload_slots

    def spool_temp_path(self, h: UpdateHeader) -> Path:
        """A fresh temporary spool file name for an update being received (renamed when accepted)."""
        self._temp_counter += 1
        return self.store.spool_dir(h.vector.round) / f".{h.client_id}.{os.getpid()}.{self._temp_counter}.tmp"

    async def accept_update(self, h: UpdateHeader, vector: np.ndarray, spooled: Path | None = None) -> SubmitResult:
        """Make a checked update durable and count it; acknowledged only when this returns.

        `spooled` is a temp file already holding the vector's bytes, fsynced (see coordinator.upload);
        without it the vector is written here.
        """
        if spooled is None and not math.isfinite(float(np.add.reduce(vector, dtype=np.float64))):
            # the float64 sum of finite float32 values cannot overflow, so this is exact and O(1) memory
            raise VectorError("update contains non-finite values (NaN or Inf); nothing was stored")
        client, round = h.client_id, h.vector.round
        self._check_open(client, round)       # the round may have closed while the chunks streamed
        if client in self._reported:
            return SubmitResult(True, True, round, "duplicate: already counted for this round")
        if client in self._pending:
            raise UnavailableError(f"an update of client {client} for round {round} is being stored; retry")
        self._pending.add(client)
        try:
            t0 = time.perf_counter()
            path = self.store.spool_path(round, client)
            if spooled is None:
                await asyncio.to_thread(atomic_write, path, vector)
            else:
                await asyncio.to_thread(_place, spooled, path)
            t1 = time.perf_counter()
            metrics = metrics_json(h.metrics)
            self.store.add_submission(SubmissionRow(round, client, h.num_examples, metrics, h.vector.sha256.hex(),
                                                    str(path.relative_to(self.store.dir)), now_ms()))
            log.debug("round %d: update of %s spooled in %.0f ms, row committed in %.0f ms", round, client,
                      1000 * (t1 - t0), 1000 * (time.perf_counter() - t1))
            # Durable from here on, so it counts: the reply need not wait for the fold. The fold runs
            # in one worker thread (the sum is not thread-safe) and the round cannot close before
            # every fold finished (see _train); at most FOLD_QUEUE vectors wait to be folded.
            await self._fold_slots.acquire()
            self._record(client, h.num_examples, metrics)
            fold = asyncio.wrap_future(self._fold_pool.submit(self._add, vector, h.num_examples))
            self._folds.add(fold)
            fold.add_done_callback(self._fold_done)
        finally:
            self._pending.discard(client)
            self.notify()
        log.info("round %d: accepted update of %s (%d examples; %d of %d selected reported)", round, client,
                 h.num_examples, len(self._reported), len(self.selected))
        return SubmitResult(True, False, round, "accepted")

    def _fold_done(self, fold: asyncio.Future) -> None:
        self._folds.discard(fold)
        self._fold_slots.release()
        if not fold.cancelled() and fold.exception() is not None:
            self._fold_error = fold.exception()
        self.notify()

    def release_polls(self) -> None:
        """Answer every held long-poll now (WAIT) and hold no new ones: the server is stopping."""
        self._stopping = True
        self.notify()

    def close(self) -> None:
        self._fold_pool.shutdown(wait=True)

    def submit_evaluation(self, client_id: str, model_id: str, round: int, num_examples: int,
                          metrics: Mapping[str, Metric]) -> SubmitResult:
        self.touch(client_id)
        self.check_model(model_id)
        if self.state is not RoundState.EVALUATING or round != self._eval_round:
            raise StaleRoundError(f"round {round} is not open for evaluation; "
                                  + (f"the evaluated round is {self._eval_round}" if self.state is RoundState.EVALUATING
                                     else f"no evaluation is open (state {self.state.name})"))
        if client_id not in self._eval_selected:
            raise StaleRoundError(f"client {client_id} was not selected to evaluate round {round}")
        if client_id in self._eval_reported:
            return SubmitResult(True, True, round, "duplicate: already counted")
        if not 1 <= num_examples <= self.config.max_examples:
            raise ProtocolError(f"num_examples must be in 1..{self.config.max_examples}, got {num_examples}")
        self.store.add_evaluation(round, client_id, num_examples, metrics_json(metrics))
        self._eval_reported[client_id] = num_examples
        self.notify()
        return SubmitResult(True, False, round, "accepted")

    def join(self, client_id: str, device_name: str, capabilities: Mapping[str, str]) -> str:
        cid = self.registry.join(client_id, device_name, capabilities)
        log.info("client %s joined (%s)", cid, device_name or "unnamed device")
        return cid

    def leave(self, client_id: str, reason: str) -> None:
        self.registry.leave(client_id, reason)
        log.info("client %s left%s", client_id, f": {reason}" if reason else "")

    def all_released(self) -> bool:
        """True once every available client has been told DONE (the server may then stop)."""
        return set(self.registry.available()) <= self._released

    def heartbeat(self, client_id: str) -> tuple[int, str]:
        self.touch(client_id)
        return self.round, self.state.name

    def status(self) -> StatusSnapshot:
        return snapshot(self.store, current_round=self.round, total_rounds=self.config.rounds,
                        state=self.state.name, registered=len(self.registry), active=self.registry.active_count())


def _place(tmp: Path, path: Path) -> None:
    """Rename a fsynced temp file into place and make the rename durable."""
    os.replace(tmp, path)
    fsync_dir(path.parent)
