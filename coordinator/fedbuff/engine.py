"""The asynchronous (FedBuff) engine: global versions instead of rounds (`mode = "async"`).

    WAITING_FOR_CLIENTS ─▶ TRAINING (version v takes updates) ─K-th update─▶ AGGREGATING ─▶ EXPORTING
         ▲                                                                                  │
         └──────────────────────────── version v + 1 is next ◀──────────────────────────────┘
    (after version `rounds` + 1: EVALUATING / DONE, as in the synchronous engine)

Every active client may train at any time on the latest version v (a FIT task names v; a client
that already contributed to v's buffer waits for v + 1). Each accepted update, trained on version
b, is folded into the buffer with weight w(v − b)·n (coordinator.fedbuff.UpdateBuffer,
coordinator.staleness); after `buffer_size` = K updates the buffer's mean delta gives the combined
vector c = x_v + Σ w·n·Δ / Σ n, and the configured server optimizer (the pipeline's server-update
stage: identity for fedavg = FedBuff with η_g = 1) turns it into x_{v+1}. A version is committed
exactly like a synchronous round — vector file, server-optimizer state, then the `rounds` row
(round = v), then the export — so `status`, exports, recovery and downloads of older versions are
the synchronous ones. A restart replays version v's acknowledged updates from the spool, each with
the base version its ledger row recorded (coordinator.async_ledger): nothing acknowledged is lost,
nothing is counted twice. Each version's metrics add staleness figures (mean, max, a histogram as
`staleness_S` counts) and throughput (`updates_per_s`).
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np

from fedort.common.durable import atomic_write
from fedort.common.invariants import present
from fedort.common.round_state import RoundState, RunState
from fedort.coordinator.aggregation import Strategy
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.engine.life_cycle import RunOutcome
from fedort.coordinator.engine.recovery import save_server_state
from fedort.coordinator.engine.round_engine import RoundEngine
from fedort.coordinator.engine.run_view import RunView
from fedort.coordinator.engine.task_dispatch import FitRule
from fedort.coordinator.engine.training_round import TrainingRound
from fedort.coordinator.export.inference import Exporter
from fedort.coordinator.fedbuff.buffer import UpdateBuffer
from fedort.coordinator.fedbuff.ledger import AsyncLedger
from fedort.coordinator.fedbuff.staleness import parse_staleness_weight
from fedort.coordinator.fedbuff.uploads import AsyncUploads, BufferFold
from fedort.coordinator.rpc.monitoring import Monitoring
from fedort.coordinator.state.store import StateStore, now_ms, read_vector
from fedort.protos.vector_stream import vector_digest

log = logging.getLogger(__name__)


class AnyActiveClient:
    """FedBuff's fit rule: while a version takes updates any active client may train on it (no selection), once
    per version, each task with a deadline of its own."""

    def __init__(self, run: RunView, config: CoordinatorConfig) -> None:
        self.run = run
        self.config = config

    def may_fit(self, client_id: str) -> bool:
        r = self.run.training
        return (
            self.run.state is RoundState.TRAINING
            and r is not None
            and client_id not in r.reported
            and client_id not in r.pending
        )

    def deadline_ms(self) -> int:
        return now_ms() + int(self.config.plan.round_timeout_s * 1000)

    def candidates(self) -> frozenset[str] | None:
        return None  # (PollTasks) no one is selected: any active client may have a FIT task


class AsyncEngine(RoundEngine):
    """Runs versions 1..config.rounds + 1 with FedBuff's buffer (same wire protocol as rounds)."""

    def __init__(
        self,
        config: CoordinatorConfig,
        store: StateStore,
        exporter: Exporter,
        strategy: Strategy | None = None,
        monitor: Monitoring | None = None,
    ) -> None:
        # the buffer, ledger and lock exist before the engine builds its intake from them (`intake`)
        self.buffer = UpdateBuffer(
            exporter.manifest.parameter_count,
            config.fedbuff.buffer_size,
            config.fedbuff.max_staleness,
            parse_staleness_weight(config.fedbuff.staleness_weight),
            version=1,
            dtype=np.dtype(np.float64),
        )
        self.ledger = AsyncLedger(store.layout.db)
        self.version_lock = asyncio.Lock()
        self._versions_done = asyncio.Event()
        super().__init__(config, store, exporter, strategy, monitor)

    # ---- the engine's extension points ----------------------------------------------------------

    def intake(self) -> AsyncUploads:
        """Its own intake (not the synchronous one): updates against their base version, into the buffer."""
        return AsyncUploads(
            self,
            config=self.config,
            store=self.store,
            registry=self.registry,
            monitor=self.monitor,
            model_id=self.model_id,
            length=self.length,
            buffer=self.buffer,
            ledger=self.ledger,
            version_lock=self.version_lock,
            spool_free=self.spool_free,
        )

    def fit_rule(self) -> FitRule:
        return AnyActiveClient(self, self.config)

    def begin_round(self) -> TrainingRound:
        """The buffer of version `self.round` (empty; recovery replays into it)."""
        self.buffer.version = self.round
        fold = BufferFold(self, self.buffer, self.ledger, self.round, self.length)
        self.training = TrainingRound(self.round, fold)  # type: ignore[arg-type]
        return self.training

    def counted_round(self, client_id: str, round: int) -> int | None:
        """The buffer that counted the client's update trained on version `round` (its ledger row), if any."""
        return self.ledger.counted_in(client_id, round)

    # ---- versions -----------------------------------------------------------------------------

    def version_vector(self, version: int) -> np.ndarray:
        """Global vector of `version` (the current one from memory, older ones from their durable files)."""
        g = self.global_vector
        if g is not None and g.round == version:
            return g.vector
        return read_vector(self.store.vector_path(version), self.length)

    def version_sha256(self, version: int) -> bytes:
        """sha256 of `version`'s global vector as recorded when it was committed (the initial vector's for 1)."""
        g = self.global_vector
        if g is not None and g.round == version:
            return g.sha256
        if version <= 1:
            recorded = self.store.get_meta("initial_vector_sha256")
        else:
            recorded = next((r.vector_sha256 for r in self.store.rounds() if r.round == version - 1), None)
        return bytes.fromhex(recorded or "")

    def _open_version(self) -> None:
        self.begin_round()
        self.open_attempt(
            1,
            frozenset(),
            f"version {self.round} takes updates: {self.buffer.buffer_size} make version {self.round + 1}",
        )

    async def commit_version(self) -> None:
        """Buffer -> server optimizer -> version v + 1, durably (vector, server state, row), then export it."""
        r, v = present(self.training, "the open version"), self.round
        self.transition(RoundState.AGGREGATING, f"{self.buffer.count} updates buffered")
        aggregate = await asyncio.to_thread(self.buffer.take)
        g = present(self.global_vector, "the global vector").vector
        vector = await asyncio.to_thread(self.strategy.server_update.apply, g, aggregate.combined(g))
        sha = vector_digest(vector)
        await asyncio.to_thread(atomic_write, self.store.vector_path(v + 1), vector)
        await asyncio.to_thread(save_server_state, self.strategy.server_update, self.store.layout, v + 1)
        row = next(x for x in self.store.rounds() if x.round == v)
        seconds = max(1e-3, (now_ms() - row.opened_ms) / 1000)
        staleness = {f"staleness_{s}": float(n) for s, n in sorted(aggregate.staleness.items())}
        total = sum(aggregate.staleness.values())
        metrics = {
            **r.metrics.means(),
            **self.strategy.server_update.metrics(),
            **staleness,
            "staleness_mean": sum(s * n for s, n in aggregate.staleness.items()) / total,
            "staleness_max": float(max(aggregate.staleness)),
            "updates_per_s": aggregate.updates / seconds,
        }
        self.store.commit_round(v, sha.hex(), aggregate.updates, aggregate.examples, metrics)
        self.drop_spool(v)
        self.store.layout.server_state(v).unlink(missing_ok=True)
        self.transition(RoundState.EXPORTING, f"global version {v + 1} is {sha.hex()[:12]}")
        self.round = v + 1
        self.set_global(self.round, vector, sha)
        self.training = None
        await self.export(v)
        if self.round <= self.config.plan.rounds:
            self.transition(RoundState.WAITING_FOR_CLIENTS, f"version {self.round} is next")
            self._open_version()
        else:
            self._versions_done.set()

    async def recover(self) -> bool:
        """The synchronous recovery (exports, global vector, server state, replay of the open buffer),
        after dropping uploads a stop interrupted (their temp files in spool folder 0, never acknowledged)."""
        temp = self.store.spool_dir(0)
        if temp.is_dir():
            for f in temp.iterdir():
                f.unlink(missing_ok=True)
        return await super().recover()

    # ---- the loop -----------------------------------------------------------------------------

    async def run(self):
        """Recover, open versions until `rounds` are committed (commits happen in the upload path), evaluate, DONE."""
        try:
            resumed = await self.recovered()
            if self.life.finished:
                return self.outcome
            if self.round <= self.config.plan.rounds:
                async with self.version_lock:
                    if not resumed:
                        await self.wait_for_clients()
                        self._open_version()
                    elif self.buffer.ready:  # K updates were acknowledged before the crash
                        await self.commit_version()
                await self._versions_done.wait()
            await self.evaluation.run()
            self.store.set_meta(run_state=RunState.DONE.value)
            self.finish(RoundState.DONE, f"{self.config.plan.rounds} versions committed")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # as in the synchronous engine: end visibly, never hang
            log.exception("async engine stopped by an error")
            message = f"version {self.round}: {type(e).__name__}: {e}"
            self.store.fail_round(self.round, message)
            self.life.end(RunOutcome(RoundState.FAILED, self.round - 1, message))
            self.notify()
        return self.outcome

    def close(self) -> None:
        """Closes the ledger (the synchronous intake's fold thread and commits never ran)."""
        self.ledger.close()


def staleness_histogram(engine: AsyncEngine) -> dict[int, int]:
    """All-time staleness -> counted updates of a running async engine."""
    return dict(sorted(engine.ledger.histogram().items()))


__all__ = ["AnyActiveClient", "AsyncEngine", "BufferFold", "staleness_histogram"]
