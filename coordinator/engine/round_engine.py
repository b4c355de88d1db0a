"""The round engine: the loop that runs the federated rounds through the run's life cycle (`life_cycle`).

A round opens once `min_available_clients` are available; it selects max(min_clients, ceil(fraction * available)) of
them (capped at what is available), seeded by (seed, round, attempt) over the sorted client ids. It closes as soon
as every selected client reported (and at least min_clients did), or at its deadline if at least min_clients did;
otherwise it is retried among available clients that have not reported, with a new deadline, up to
max_round_attempts, and then the run FAILS with a message saying why: a round never hangs. A non-finite aggregate is
refused and its round reopened the same way (`refused_aggregate`).

A full disk at a round's open, commit or export is waited out (`storage.retry_when_full`), not fatal. A committed
round exports in the background, overlapped with the next round; the run ends only after the last export.

The engine owns the run's state; each collaborator gets only what it uses, reading the run through
`run_view.RunView`: client calls (`task_dispatch`), update intake (`uploads.intake`), the commit (`round_commit`),
exports (`export.round_exports`), restart replay (`recovery`), evaluation (`evaluation`), the round's close
(`round_deadline`), privacy (`privacy.round_privacy`). Another schedule (`fedbuff.engine`) extends it at `intake`,
`fit_rule`, `begin_round`, `counted_round`, `recover`, `run` and `close`.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

import numpy as np

from fedort.common.errors import StaleRoundError
from fedort.common.invariants import present
from fedort.common.round_state import RoundState, RunState
from fedort.coordinator.aggregation import Strategy
from fedort.coordinator.aggregation.server_optimizers.stage import configured_strategy
from fedort.coordinator.colocated.local_vectors import LocalVectorDir
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.engine import recovery
from fedort.coordinator.engine.evaluation import EvaluationPhase
from fedort.coordinator.engine.life_cycle import IllegalTransition, LifeCycle, RunOutcome
from fedort.coordinator.engine.refused_aggregate import commit_or_retry, retry_refused
from fedort.coordinator.engine.registry import ClientRegistry
from fedort.coordinator.engine.round_commit import commit_round
from fedort.coordinator.engine.round_deadline import wait_for_close
from fedort.coordinator.engine.selection import attempt_selection, until_available
from fedort.coordinator.engine.task_dispatch import FitRule, SelectedClients, TaskDispatch
from fedort.coordinator.engine.training_round import GlobalVector, TrainingRound
from fedort.coordinator.export.inference import Exporter
from fedort.coordinator.export.round_exports import RoundExports
from fedort.coordinator.privacy.round_privacy import PrivacyPlan
from fedort.coordinator.rpc.download_delta import DownloadDeltas
from fedort.coordinator.rpc.monitoring import Monitoring
from fedort.coordinator.state.storage import retry_when_full
from fedort.coordinator.state.store import StateStore, now_ms
from fedort.coordinator.uploads.admission import accepted_digests
from fedort.coordinator.uploads.intake import UploadIntake, Uploads
from fedort.coordinator.uploads.spool_free import FreeSpoolFiles, drop_spool

__all__ = ["IllegalTransition", "RoundEngine", "RunOutcome"]

log = logging.getLogger(__name__)


class RoundEngine:
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
        self.life = LifeCycle(store)  # the state machine, and the change signal long-polls and the loop wait on
        self.notify, self.wait_change, self.wait_done = self.life.notify, self.life.wait_change, self.life.wait_done
        self.registry = ClientRegistry(store, config.plan.client_timeout_s, on_change=self.notify)
        self.privacy = PrivacyPlan(config, store)
        self.strategy = self.privacy.strategy(configured_strategy(config, strategy))
        self.round = 1
        self.training: TrainingRound | None = None
        self.global_vector: GlobalVector | None = None
        self._deadline_ms = 0  # the open attempt's
        self._recovered = self._resumed = self._stopping = False
        self.secagg = None
        if config.privacy.secagg:  # imported only for a masked run: the protocol and its key agreement
            from fedort.coordinator.privacy.secagg.secure_round import SecAggRound

            self.secagg = SecAggRound(
                self,
                config=config,
                store=store,
                registry=self.registry,
                length=self.length,
                dp=self.privacy.dp,
                combiner=self.strategy.combiner,
            )
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
        self.evaluation = EvaluationPhase(
            self, config=config, store=store, registry=self.registry, model_id=self.model_id, length=self.length
        )
        self.uploads: UploadIntake = self.intake()
        self.dispatch = d = TaskDispatch(
            self,
            config=config,
            store=store,
            registry=self.registry,
            evaluation=self.evaluation,
            model_id=self.model_id,
            length=self.length,
            fit=self.fit_rule(),
            secagg=self.secagg,
        )
        self.exports = RoundExports(
            self, config, store, exporter, self.length, self.uploads.bytes_received, exported=self.drop_spool
        )
        self.download_deltas = DownloadDeltas(store)
        self.submit_update = self.uploads.submit  # admit, receive, store and count one update (`coordinator.uploads`)
        self.export, self.exports_done = self.exports.export, self.exports.done
        # the servicer's calls that the dispatch answers
        self.join, self.leave, self.touch, self.heartbeat = d.join, d.leave, d.touch, d.heartbeat
        self.check_model, self.status, self.outcome_asked = d.check_model, d.status, d.outcome_asked
        self.poll, self.poll_many, self.vector_for = d.poll, d.poll_many, d.vector_for
        self.submit_evaluation, self.all_released, self.all_told = d.submit_evaluation, d.all_released, d.all_told

    # ---- extension points (a mode with another schedule overrides these: fedbuff.engine) -------

    def intake(self) -> UploadIntake:
        """The run's update intake (called once, while the engine is built)."""
        return Uploads(
            self,
            config=self.config,
            store=self.store,
            registry=self.registry,
            monitor=self.monitor,
            model_id=self.model_id,
            length=self.length,
            streaming=self.strategy.combiner.streaming,
            spool_free=self.spool_free,
            secagg=self.secagg,
        )

    def fit_rule(self) -> FitRule:
        """Who gets a FIT task while a round trains (called once, while the engine is built)."""
        return SelectedClients(self, self.secagg)

    def begin_round(self) -> TrainingRound:
        """Fresh bookkeeping and aggregator for round `self.round`, starting from the current global vector."""
        g = present(self.global_vector, "the global vector")
        self.training = TrainingRound(self.round, self.strategy.new_round(g.vector))
        return self.training

    def counted_round(self, client_id: str, round: int) -> int | None:
        """The round that counted `client_id`'s update trained on `round`, if any run record says so (`resubmission`)."""
        return round

    # ---- the life cycle -----------------------------------------------------------------------

    @property
    def state(self) -> RoundState:
        return self.life.state

    def transition(self, new: RoundState, why: str = "") -> None:
        """Move to `new` (IllegalTransition names both states if the life cycle does not allow it)."""
        self.life.transition(self.round, new, why)

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def deadline_ms(self) -> int:
        """The deadline of the open attempt, or of the evaluation phase once it started."""
        return self.evaluation.deadline_ms or self._deadline_ms

    @property
    def outcome(self) -> RunOutcome | None:
        return self.life.outcome

    @property
    def attempt(self) -> int:
        return self.training.attempt if self.training else 0

    @property
    def selected(self) -> frozenset[str]:
        return self.training.selected if self.training else frozenset()

    def finish(self, state: RoundState, message: str) -> None:
        """End the run in `state` (DONE or FAILED) saying why."""
        self.life.finish(self.round, state, message)

    def set_global(self, round: int, vector: np.ndarray, sha256: bytes, blake3: bytes | None = None) -> None:
        """Make `vector` the global vector; `blake3`: its BLAKE3 if computed (else here, if `blake3_globals`)."""
        if blake3 is None and self.blake3_globals:
            blake3 = LocalVectorDir.file_digest(vector)
        self.global_vector = GlobalVector(round, vector, sha256, blake3 or b"")
        if self.local_vectors is not None:
            self.local_vectors.publish(self.store.vector_path(round), sha256)

    async def secagg_step(
        self, client_id: str, model_id: str, round: int, step: int, payload: bytes, wait_ms: int
    ) -> tuple[bool, bytes]:
        """One secure-aggregation protocol step (see `privacy.secagg.secure_round`)."""
        if self.secagg is None:
            self.touch(client_id)
            raise StaleRoundError("this run does not use secure aggregation (no --secagg)")
        return await self.secagg.step(client_id, model_id, round, step, payload, wait_ms)

    async def secagg_batch(self, calls, wait_ms: int):
        """Many clients' steps in one call (`privacy.secagg.batch`): a StepAnswer per StepCall."""
        from fedort.coordinator.privacy.secagg.batch import run_batch

        return await run_batch(self.secagg, calls, wait_ms)

    def drop_spool(self, round: int) -> None:
        """Delete a committed round's spool (unless kept), recycling its files: co-located devices' pool first."""
        if not self.config.uploads.keep_spool:
            drop_spool(self.store.spool_dir(round), [p for p in (self.local_vectors, self.spool_free) if p is not None])

    # ---- main loop ----------------------------------------------------------------------------

    async def recover(self) -> bool:
        """Rebuild memory from the state dir (before serving, `recovery`); True if an open round was resumed."""
        self._resumed = await recovery.resume(
            self,
            self.store,
            length=self.length,
            rounds=self.config.plan.rounds,
            initial_vector=self.exporter.initial_vector,
            server_update=self.strategy.server_update,
            evaluated=self.evaluation.finished,
            is_active=self.registry.is_active,
        )
        self._recovered = True
        return self._resumed

    async def recovered(self) -> bool:
        """`recover()` unless it ran already (as the server does before serving); True if a round was resumed."""
        return self._resumed if self._recovered else await self.recover()

    async def run(self) -> RunOutcome:
        """Recover from the state dir, then run every remaining round, evaluation, DONE (or FAILED)."""
        try:
            resumed = await self.recovered()
            if self.life.finished:
                return present(self.outcome, "the run's outcome")
            stopped, export_next = None, None
            self.exports.prepare()  # while clients join
            while self.round <= self.config.plan.rounds:
                if not resumed:
                    await self.wait_for_clients()
                    if stopped := self.privacy.budget_stop(self.round, self.registry):
                        log.warning("%s", stopped)
                        break
                    self.begin_round()
                    # disk full: wait for space, not die (each step below is idempotent); the open's
                    # transaction also commits the previous round if its commit was deferred
                    await retry_when_full(lambda: self.select(attempt=1), f"round {self.round} open")
                    if export_next is not None:
                        self.exports.start(export_next)
                        export_next = None
                resumed = False
                if not await self._train():
                    return present(self.outcome, "the run's outcome")
                # the commit of a round the next one follows shares the next open's fsync (round_commit)
                # (not with privacy accounting: its budget check before the next open reads committed rows)
                defer = self.round < self.config.plan.rounds and self.secagg is None and not self.privacy.accounting
                # a non-finite aggregate: reopened, or FAILED
                while not await commit_or_retry(partial(self._commit, defer), self._refused):
                    if self.life.finished or not await self._train():
                        return present(self.outcome, "the run's outcome")
                if defer:
                    export_next = self.round - 1  # its export reads the committed row: after the open
                else:
                    self.exports.start(self.round - 1)
                if self.round <= self.config.plan.rounds:
                    self.transition(RoundState.WAITING_FOR_CLIENTS, f"round {self.round} is next")
            self.store.flush()
            if export_next is not None:
                self.exports.start(export_next)
            await self.exports.done()
            await self.evaluation.run()
            done = {"run_state": RunState.DONE.value, **({"run_message": stopped} if stopped else {})}
            await retry_when_full(lambda: self.store.set_meta(**done), "run end")  # disk full: wait, not fail
            self.finish(RoundState.DONE, stopped or f"{self.config.plan.rounds} rounds completed")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # an unplanned error must end the run visibly, not hang it
            log.exception("round engine stopped by an error")
            self.life.fail(self.round, f"round {self.round}: {type(e).__name__}: {e}")
        return present(self.outcome, "the run's outcome")

    async def wait_for_clients(self) -> None:
        """Until `min_available_clients` are available (`selection.until_available`)."""
        need = present(self.config.plan.min_available_clients, "min_available_clients")
        await until_available(need, self.registry, self.store, self.round, self.wait_change)

    def select(self, attempt: int) -> None:
        """Select clients besides those that already reported, then open the attempt."""
        r, ids = present(self.training, "the open round"), self.registry.available()
        cheaters = frozenset() if self.secagg is None else self.secagg.excluded()  # privacy/secagg/exclusion.py
        selected, why = attempt_selection(ids, r.reported, self.config, self.round, attempt, cheaters)
        self.open_attempt(attempt, selected, why)

    def open_attempt(self, attempt: int, selected: frozenset[str], why: str) -> None:
        """Record the attempt durably with a fresh deadline and move to TRAINING."""
        r = present(self.training, "the open round")
        r.attempt, r.selected, r.closing = attempt, selected, False
        r.deadline_ms = self._deadline_ms = now_ms() + int(self.config.plan.round_timeout_s * 1000)
        self.store.open_round(self.round, attempt, selected, r.deadline_ms)
        self.privacy.round_opened(r, len(self.registry))
        if self.secagg is not None:
            self.secagg.round_opened()
        self.transition(RoundState.TRAINING, why)

    async def _train(self) -> bool:
        """Wait for the open round to close, retrying it as needed; False if the run failed."""
        if self.secagg is not None:  # the protocol's phases decide (see secagg_round)
            return await self.secagg.train()
        cfg, r = self.config, present(self.training, "the open round")
        while True:
            await wait_for_close(r, self.uploads, self.wait_change, cfg.plan.min_clients)
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
        """Commit the closed round (`round_commit`; `defer`: its row with the next round's open), then move on."""
        committed = await commit_round(
            present(self.training, "the open round"),
            store=self.store,
            strategy=self.strategy,
            length=self.length,
            inline_bytes=self.config.uploads.inline_update_bytes,
            blake3=self.blake3_globals,
            round_metrics=lambda: self.privacy.round_metrics(self.secagg),
            defer=defer,
        )
        sha = committed.sha256
        self.transition(RoundState.EXPORTING, f"global vector of round {self.round + 1} is {sha.hex()[:12]}")
        self.round += 1
        self.set_global(self.round, committed.vector, sha, committed.blake3)
        self.training = None

    def _refused(self, reason: str) -> None:
        """A refused aggregate: discard the attempt's updates and retry the round, or fail (`refused_aggregate`)."""
        retry_refused(
            self,
            present(self.training, "the open round"),
            reason,
            store=self.store,
            bytes_received=self.uploads.bytes_received,
            max_attempts=self.config.plan.max_round_attempts,
            secure=self.secagg is not None,
        )

    def release_polls(self) -> None:
        """Answer every held long-poll now (WAIT) and hold no new ones: the server is stopping."""
        self._stopping = True
        self.notify()
        if self.secagg is not None:
            self.secagg.wake()  # its held steps wait for their phase only (secagg_round.hold)

    def close(self) -> None:
        self.exports.close()
        self.uploads.close()
        if self.local_vectors is not None:
            self.local_vectors.clear_free()  # recycled update files (coordinator.local_vectors) hold no one's data
        self.spool_free.clear()
