"""The round engine: one explicit state machine and the loop that runs the federated rounds.

    WAITING_FOR_CLIENTS --> TRAINING --> AGGREGATING --> EXPORTING --> WAITING_FOR_CLIENTS (next round)
                               |  ^                          |------> EVALUATING --> DONE
                               +--+ retry (attempt + 1)      +------> DONE
    any state --> FAILED (a round without quorum after max_round_attempts, or an unplanned error)

A round opens once `min_available_clients` are available; it selects
max(min_clients, ceil(fraction * available)) of them (capped at what is available), seeded by
(seed, round, attempt) over the sorted client ids. It closes as soon as every selected client
reported (and at least min_clients did), or at its deadline if at least min_clients did;
otherwise it is retried among available clients that have not reported, with a new deadline, up
to max_round_attempts, and then the run FAILS with a message saying why: a round never hangs. A
non-finite aggregate is refused and its round reopened the same way (`refused_aggregate`).

A full disk at a round's open, commit or export is waited out (`storage.retry_when_full`), not
fatal. A committed round's export (inference model, server eval, model.json) runs in the background,
overlapped with the next round, one export at a time; a crash before it finished redoes it on
restart (the round row stays COMMITTED until then), and the run ends only after the last one.
The committed round's spool is deleted by the same background job. Every transition is logged and
recorded (with its time) in the state database. The rest lives beside this module: upload admission (`admission`), the upload path into the spool and the aggregator (`uploads`), the aggregation
pipeline (`aggregation`), restart replay (`recovery`), the evaluation phase (`evaluation`), when a round
closes (`round_deadline`) and the client-facing calls (`task_dispatch`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import numpy as np

from fedort.common.durable import atomic_write, drop_cached
from fedort.common.errors import FedortError
from fedort.common.faults import fault_point
from fedort.common.invariants import present
from fedort.common.round_state import RoundRowState, RoundState, RunState
from fedort.coordinator.aggregation import Strategy
from fedort.coordinator.aggregation.server_optimizers.stage import configured_strategy
from fedort.coordinator.colocated.local_vectors import LocalVectorDir
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.engine.evaluation import EvaluationPhase
from fedort.coordinator.engine.recovery import acknowledged_updates, recover, save_server_state
from fedort.coordinator.engine.refused_aggregate import candidate, commit_or_retry
from fedort.coordinator.engine.registry import ClientRegistry
from fedort.coordinator.engine.round_deadline import wait_for_close
from fedort.coordinator.engine.selection import sample_size, select_clients
from fedort.coordinator.engine.task_dispatch import TaskDispatch
from fedort.coordinator.engine.training_round import GlobalVector, TrainingRound
from fedort.coordinator.export.inference import Exporter
from fedort.coordinator.export.round_exports import RoundExports
from fedort.coordinator.privacy.round_privacy import PrivacyPlan
from fedort.coordinator.rpc.download_delta import DownloadDeltas
from fedort.coordinator.rpc.monitoring import Monitoring
from fedort.coordinator.state.schema import TransitionRow
from fedort.coordinator.state.storage import retry_when_full
from fedort.coordinator.state.store import StateStore, now_ms
from fedort.coordinator.uploads.admission import accepted_digests
from fedort.coordinator.uploads.intake import Uploads
from fedort.coordinator.uploads.spool_free import FreeSpoolFiles
from fedort.protos.vector_stream import vector_digest

log = logging.getLogger(__name__)

S = RoundState
SMALL_VECTOR = 1 << 16  # values: a round result this small is computed on the event loop
_ALLOWED: dict[RoundState, frozenset[RoundState]] = {
    S.WAITING_FOR_CLIENTS: frozenset({S.TRAINING, S.EVALUATING, S.DONE, S.FAILED}),
    S.TRAINING: frozenset({S.TRAINING, S.AGGREGATING, S.FAILED}),
    S.AGGREGATING: frozenset({S.EXPORTING, S.TRAINING, S.FAILED}),  # TRAINING: a refused aggregate (refused_aggregate)
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


class RoundEngine(TaskDispatch, RoundExports):
    """Runs rounds 1..config.rounds over the clients in `registry`, durably in `store`."""

    def __init__(
        self,
        config: CoordinatorConfig,
        store: StateStore,
        exporter: Exporter,
        strategy: Strategy | None = None,
        monitor: Monitoring | None = None,
    ) -> None:
        self.config = config
        self.monitor = monitor or Monitoring.disabled()  # fed by the uploads and the servicer
        self.store = store
        self.exporter = exporter
        self.manifest = exporter.manifest
        self.model_id = self.manifest.model_id
        self.length = self.manifest.parameter_count
        self.registry = ClientRegistry(store, config.plan.client_timeout_s, on_change=self.notify)
        self.privacy = PrivacyPlan(config)
        self.strategy = self.privacy.strategy(configured_strategy(config, strategy))
        self.state = RoundState.WAITING_FOR_CLIENTS
        self.round = 1
        self.deadline_ms = 0
        self.training: TrainingRound | None = None
        self.global_vector: GlobalVector | None = None
        self.evaluation = EvaluationPhase(self)
        self.uploads = Uploads(self)
        self.download_deltas = DownloadDeltas(self)
        self.secagg = None
        if config.privacy.secagg:  # imported only for a masked run: the protocol and its key agreement
            from fedort.coordinator.privacy.secagg.secure_round import SecAggRound

            self.secagg = SecAggRound(self)
        self.local_vectors = (
            None
            if config.transport.local_vector_dir is None
            else LocalVectorDir.open(config.transport.local_vector_dir, store.layout.root)
        )  # co-located devices' files
        # FIT tasks carry the global's BLAKE3 (Task.vector_blake3) for co-located file reads and, announced, for
        # streamed downloads a device asks to check with it (VectorRequest.digests, protocol 1.6)
        self.blake3_globals = self.local_vectors is not None or "blake3" in accepted_digests(config)
        self.spool_free = FreeSpoolFiles(store.layout.spool)  # committed spool files that streamed uploads overwrite
        self.spool_free.clear()
        self._changed = asyncio.Event()
        self._finished = asyncio.Event()
        self._outcome: RunOutcome | None = None
        self._released: set[str] = set()  # clients told DONE
        self._told: set[str] = set()  # of those, clients that then asked the run's outcome (Status)
        self._recovered = self._resumed = False
        self._stopping = False

    # ---- state machine ------------------------------------------------------------------------

    def transition(self, new: RoundState, why: str = "") -> None:
        """Move to `new` (IllegalTransition names both states if the life cycle does not allow it)."""
        if new not in _ALLOWED[self.state]:
            raise IllegalTransition(
                f"illegal round transition from {self.state.name} to {new.name} (round {self.round})"
            )
        log.info("round %d: %s -> %s%s", self.round, self.state.name, new.name, f" ({why})" if why else "")
        self.store.note_transition(TransitionRow(self.round, self.state.name, new.name, time.time(), why))
        self.state = new
        self.notify()

    _transition = transition

    def notify(self) -> None:
        """Wake every long-poll and the engine loop: something changed."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_change(self, timeout: float) -> None:
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

    @property
    def attempt(self) -> int:
        return self.training.attempt if self.training else 0

    @property
    def selected(self) -> frozenset[str]:
        return self.training.selected if self.training else frozenset()

    async def wait_done(self) -> RunOutcome:
        await self._finished.wait()
        assert self._outcome is not None
        return self._outcome

    def finish(self, state: RoundState, message: str) -> None:
        if state is RoundState.FAILED:
            log.error("run failed: %s", message)
        self.transition(state, message)
        done = sum(1 for r in self.store.rounds() if RoundRowState(r.state).committed)
        self._outcome = RunOutcome(state, done, message)
        self._finished.set()

    def set_global(self, round: int, vector: np.ndarray, sha256: bytes, blake3: bytes | None = None) -> None:
        """Make `vector` the global vector; `blake3`: its BLAKE3 if already computed (else computed here when
        devices may check with it: `blake3_globals`)."""
        if blake3 is None and self.blake3_globals:
            blake3 = LocalVectorDir.file_digest(vector)
        self.global_vector = GlobalVector(round, vector, sha256, blake3 or b"")
        if self.local_vectors is not None:
            self.local_vectors.publish(self.store.vector_path(round), sha256)

    # ---- main loop ----------------------------------------------------------------------------

    async def recover(self) -> bool:
        """Rebuild memory from the state dir (before serving); True if an open round was resumed."""
        self._resumed = await recover(self)
        self._recovered = True
        return self._resumed

    async def run(self) -> RunOutcome:
        """Recover from the state dir, then run every remaining round, evaluation, DONE (or FAILED)."""
        try:
            resumed = self._resumed if self._recovered else await self.recover()
            if self._finished.is_set():
                return present(self._outcome, "the run's outcome")
            stopped, export_next = None, None
            self.prepare_exports()  # while clients join
            while self.round <= self.config.plan.rounds:
                if not resumed:
                    await self._wait_for_clients()
                    if stopped := self.privacy.budget_stop(self):
                        log.warning("%s", stopped)
                        break
                    self.begin_round()
                    # disk full: wait for space, not die (each step below is idempotent); the open's
                    # transaction also commits the previous round if its commit was deferred
                    await retry_when_full(lambda: self.select(attempt=1), f"round {self.round} open")
                    if export_next is not None:
                        self.start_export(export_next)
                        export_next = None
                resumed = False
                if not await self._train():
                    return present(self._outcome, "the run's outcome")
                # the commit of a round the next one follows shares the next open's fsync (see _commit)
                # (not with privacy accounting: its budget check before the next open reads committed rows)
                defer = self.round < self.config.plan.rounds and self.secagg is None and not self.privacy.accounting
                while not await commit_or_retry(self, defer):  # a non-finite aggregate: reopened, or FAILED
                    if self._finished.is_set() or not await self._train():
                        return present(self._outcome, "the run's outcome")
                if defer:
                    export_next = self.round - 1  # its export reads the committed row: after the open
                else:
                    self.start_export(self.round - 1)
                if self.round <= self.config.plan.rounds:
                    self.transition(RoundState.WAITING_FOR_CLIENTS, f"round {self.round} is next")
            self.store.flush()
            if export_next is not None:
                self.start_export(export_next)
            await self.exports_done()
            await self.evaluation.run()
            done = {"run_state": RunState.DONE.value, **({"run_message": stopped} if stopped else {})}
            await retry_when_full(lambda: self.store.set_meta(**done), "run end")  # disk full: wait, not fail
            self.finish(RoundState.DONE, stopped or f"{self.config.plan.rounds} rounds completed")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # an unplanned error must end the run visibly, not hang it
            log.exception("round engine stopped by an error")
            message = f"round {self.round}: {type(e).__name__}: {e}"
            if not self.state.final:  # recorded with fail_round's transaction
                self.store.note_transition(
                    TransitionRow(self.round, self.state.name, RoundState.FAILED.name, time.time(), message)
                )
            try:
                self.store.fail_round(self.round, message)
            except Exception as record_error:  # noqa: BLE001 - e.g. disk full: the run still ends FAILED in memory
                log.error("could not record the failure in %s: %s", self.store.dir, record_error)
            finally:
                self.state = RoundState.FAILED
                self._outcome = RunOutcome(RoundState.FAILED, self.round - 1, message)
                self._finished.set()
                self.notify()
        return present(self._outcome, "the run's outcome")

    async def _wait_for_clients(self) -> None:
        need = present(self.config.plan.min_available_clients, "min_available_clients")
        last_log = 0.0
        if self.store.deferred and len(self.registry.available()) < need:
            self.store.flush()  # a deferred commit does not wait for clients
        while (n := len(self.registry.available())) < need:
            if time.monotonic() - last_log > 30:
                log.info("round %d: waiting for clients: %d of %d available", self.round, n, need)
                last_log = time.monotonic()
            await self.wait_change(1.0)

    def begin_round(self) -> TrainingRound:
        """Fresh bookkeeping and aggregator for round `self.round`, starting from the current global vector."""
        g = present(self.global_vector, "the global vector")
        self.training = TrainingRound(self.round, self.strategy.new_round(g.vector))
        return self.training

    def select(self, attempt: int) -> None:
        """Select clients besides those that already reported, then open the attempt."""
        cfg, r = self.config, present(self.training, "the open round")
        available = set(self.registry.available())
        candidates = sorted(available - set(r.reported))
        keep = frozenset(r.reported)
        target = sample_size(len(available | keep), cfg.plan.fraction, cfg.plan.min_clients)
        k = max(0, min(target - len(keep), len(candidates)))
        chosen = select_clients(candidates, k, cfg.plan.seed, self.round, attempt)
        why = (
            f"attempt {attempt}/{cfg.plan.max_round_attempts}: selected {len(chosen)} of {len(candidates)} "
            f"available clients"
            + (f", keeping {len(keep)} that reported" if keep else "")
            + f", deadline in {cfg.plan.round_timeout_s:g} s"
        )
        self.open_attempt(attempt, frozenset(chosen) | keep, why)

    def open_attempt(self, attempt: int, selected: frozenset[str], why: str) -> None:
        """Record the attempt durably with a fresh deadline and move to TRAINING."""
        r = present(self.training, "the open round")
        r.attempt, r.selected, r.closing = attempt, selected, False
        r.deadline_ms = self.deadline_ms = now_ms() + int(self.config.plan.round_timeout_s * 1000)
        self.store.open_round(self.round, attempt, selected, r.deadline_ms)
        self.privacy.round_opened(self)
        self.transition(RoundState.TRAINING, why)

    async def _train(self) -> bool:
        """Wait for the open round to close, retrying it as needed; False if the run failed."""
        if self.secagg is not None:  # the protocol's phases decide (see secagg_round)
            return await self.secagg.train()
        cfg, r = self.config, present(self.training, "the open round")
        while True:
            await wait_for_close(self)
            n = len(r.reported)
            if n >= cfg.plan.min_clients:
                how = "all selected clients reported" if r.selected <= set(r.reported) else "deadline"
                self.transition(RoundState.AGGREGATING, f"{how}: {n} updates, {r.examples} examples")
                return True
            if r.attempt >= cfg.plan.max_round_attempts:
                message = (
                    f"round {self.round} failed: {n} of the required {cfg.plan.min_clients} clients reported after "
                    f"{r.attempt} attempt(s) of {cfg.plan.round_timeout_s:g} s; "
                    f"{len(self.registry.available())} clients available"
                )
                self.store.fail_round(self.round, message)
                self.finish(RoundState.FAILED, message)
                return False
            log.warning(
                "round %d: only %d of %d required updates by the deadline; retrying",
                self.round,
                n,
                cfg.plan.min_clients,
            )
            self.select(r.attempt + 1)

    async def _commit(self, defer: bool = False) -> None:
        """Aggregate, write the next global vector (and server state) durably, then mark the round committed.

        `defer`: the round's row is committed with the next transaction, the next round's open (one WAL
        fsync for both); no task of the next round exists before that transaction, so nothing acts on
        an uncommitted round, and a crash in between replays it from its durable updates."""
        fault_point("round.before_commit")
        r = present(self.training, "the open round")
        t0 = time.perf_counter()
        if r.aggregator.stale:  # an update folded while checked was not counted (uploads): refold the counted ones
            updates = acknowledged_updates(self, self.round)
            log.warning(
                "round %d: the sum held an update that was not counted; refolding the %d acknowledged updates",
                self.round,
                len(updates),
            )
            await asyncio.to_thread(r.aggregator.rebuild, updates)
        small = self.length <= SMALL_VECTOR and not self.strategy.needs_all_updates  # microseconds: no thread hop
        # a vector this small is durable inside the commit's row; its file is fsynced by the export, off the critical path
        inline_sized = 0 < 4 * self.length <= self.config.uploads.inline_update_bytes
        # the new vector file's page cache takes the pages of g_{r-1}'s, freed while the mean is computed
        # (durable.drop_cached; nothing reads g_{r-1} now: deltas read g_r)
        older = None if inline_sized else self.store.vector_path(self.round - 1)
        dropping = None if older is None else asyncio.ensure_future(asyncio.to_thread(drop_cached, older))
        result = await candidate(r.aggregator, small)  # RefusedAggregate if not finite
        if self.strategy.needs_all_updates:
            log.info(
                "round %d: %s aggregated %d spooled updates in %.1f ms",
                self.round,
                self.strategy,
                result.updates,
                1000 * (time.perf_counter() - t0),
            )
        vector = result.vector
        # a large vector's sha256 runs in a thread while the files are written, not on the loop
        hashing = None if small else asyncio.ensure_future(asyncio.to_thread(vector_digest, vector))
        sha = vector_digest(vector) if small else b""
        # devices check the file they read or the stream they receive with BLAKE3: computed beside the sha256
        # (a small vector's: microseconds, in set_global, with no thread hop between the commit and the new global)
        file_digest = (
            None
            if not self.blake3_globals or small
            else asyncio.ensure_future(asyncio.to_thread(LocalVectorDir.file_digest, vector))
        )
        metrics = {**r.metrics.means(), **self.strategy.server_update.metrics(), **self.privacy.round_metrics(self)}

        inline = vector.tobytes() if inline_sized else None
        if dropping is not None:
            await dropping

        def write_files() -> None:
            atomic_write(self.store.vector_path(self.round + 1), vector, durable=inline is None)
            save_server_state(self, self.round + 1)

        async def persist() -> None:  # computed once above (a stateful server update must not step twice)
            nonlocal sha
            await asyncio.to_thread(write_files)
            if hashing is not None:
                sha = await hashing
            self.store.commit_round(self.round, sha.hex(), len(r.reported), r.examples, metrics, defer, inline)

        await retry_when_full(persist, f"round {self.round} commit")  # disk full: wait for space, not die
        log.info(
            "round %d: committed %d updates over %d examples; metrics %s",
            self.round,
            len(r.reported),
            r.examples,
            {k: round(v, 5) for k, v in metrics.items()},
        )
        self.store.layout.server_state(self.round).unlink(missing_ok=True)  # superseded by round + 1's
        self.transition(RoundState.EXPORTING, f"global vector of round {self.round + 1} is {sha.hex()[:12]}")
        self.round += 1
        self.set_global(self.round, vector, sha, None if file_digest is None else await file_digest)
        self.training = None

    def release_polls(self) -> None:
        """Answer every held long-poll now (WAIT) and hold no new ones: the server is stopping."""
        self._stopping = True
        self.notify()
        if self.secagg is not None:
            self.secagg.wake()  # its held steps wait for their phase only (secagg_round.hold)

    def close(self) -> None:
        self.close_exports()
        self.uploads.close()
        if self.local_vectors is not None:
            self.local_vectors.clear_free()  # recycled update files (coordinator.local_vectors) hold no one's data
        self.spool_free.clear()
