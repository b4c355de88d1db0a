"""A training round under secure aggregation: the protocol's phases as durable round states.

    TRAINING ─┬─ SECAGG_ADVERTISE   clients train, then send two public keys      (until all, or the round deadline)
              ├─ SECAGG_SHARE_KEYS  sealed Shamir shares, routed by the coordinator (until all of U1, or a phase deadline)
              ├─ SECAGG_MASKED_INPUT masked uploads (codec secagg-u64), summed mod 2^b (until all of U2, or a deadline)
              └─ SECAGG_UNMASK      survivors send the shares that remove the masks   (until all of U3, or a deadline)
    ─▶ AGGREGATING (the unmasked SUM only) ─▶ the usual commit

`SecAggServer` (coordinator/privacy/secagg/server.py) holds the protocol state; this module drives it,
answers the `SecAgg` RPC through `SecAggSteps` (steps.py) and keeps it durable through `SecAggRecord` (record.py):
after every accepted message and phase close the protocol state is written atomically to
`secagg/round-NNNN.state` before any client hears of it, and the uint64 sum with it (`.sum`) when
masked-input collection closes. Masked inputs are durable
like any update (spool file + row, acknowledged after both); a restart during their collection
folds them again from the spool into a fresh accumulator, after it the recorded sum is used, so
each is counted exactly once. A restarted coordinator resumes in the phase it recorded. The spool
only ever holds masked vectors. A phase that ends with fewer than T clients (or a client whose
masks can no longer be removed, or shares no single liar explains: `share_checks`) aborts: its
masked inputs are forgotten and the round is retried with a fresh protocol run while attempts
remain (`max_round_attempts`), without the members the attempt caught cheating or that were
accused (`exclusion.py`; the engine's selection asks `excluded`); then it fails with the reason in
status and log, the global model unchanged, and a restart begins the round anew.
Each phase after the first gets `round_timeout_s` (a device may still be training in the first two:
keys need no update, `SecAggFlow.run_when`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from fedort.common.dp_noise import distributed_noise_std
from fedort.common.errors import ConfigError, ProtocolError, StaleRoundError, VectorError
from fedort.common.invariants import present
from fedort.common.round_state import RoundState
from fedort.common.secagg import (
    FixedPoint,
    SecAggAborted,
    SecAggError,
    SecAggParams,
    default_threshold,
    effective_degree,
)
from fedort.common.secagg.pack import is_masked, packed_bits, packed_codec
from fedort.common.secagg.phases import Phase
from fedort.common.secagg.scheme import LEGACY, negotiate
from fedort.common.secagg.task import MAX_WEIGHT, SECAGG_CODEC, SecAggTask, weight_cap
from fedort.coordinator.engine.run_view import RunView
from fedort.coordinator.privacy.secagg.exclusion import Exclusions
from fedort.coordinator.privacy.secagg.record import SecAggRecord
from fedort.coordinator.privacy.secagg.secure_sum import SecureSum
from fedort.coordinator.privacy.secagg.server import SecAggResult, SecAggServer
from fedort.coordinator.privacy.secagg.steps import SecAggSteps
from fedort.coordinator.state.schema import TransitionRow
from fedort.coordinator.state.store import now_ms
from fedort.protos.messages import UpdateHeader

if TYPE_CHECKING:
    from fedort.coordinator.aggregation.combiner import Combiner
    from fedort.coordinator.config import CoordinatorConfig
    from fedort.coordinator.engine.training_round import TrainingRound
    from fedort.coordinator.privacy.dp_fedavg import DPClipState
    from fedort.coordinator.state.store import StateStore
    from fedort.coordinator.uploads.intake import UploadIntake


class SecureRun(RunView, Protocol):
    """What a secure round reads of the run and asks of it (the round engine satisfies it)."""

    @property
    def uploads(self) -> UploadIntake: ...

    def transition(self, new: RoundState, why: str = "") -> None: ...

    def begin_round(self) -> TrainingRound: ...

    def select(self, attempt: int) -> None:
        """Open the next attempt with a fresh selection (the excluded left out)."""
        ...

    def finish(self, state: RoundState, message: str) -> None: ...

    def touch(self, client_id: str) -> None: ...

    def check_model(self, model_id: str) -> None: ...


class Capabilities(Protocol):
    def capabilities(self, client_id: str) -> Mapping[str, str]: ...


log = logging.getLogger("fedort.coordinator.engine.round_engine")

_PHASE_STATE = {
    Phase.ADVERTISE: "SECAGG_ADVERTISE",
    Phase.SHARE_KEYS: "SECAGG_SHARE_KEYS",
    Phase.MASKED_INPUT: "SECAGG_MASKED_INPUT",
    Phase.UNMASK: "SECAGG_UNMASK",
    Phase.DONE: "AGGREGATING",
    Phase.FAILED: "FAILED",
}


def default_degree(cohort: int) -> int:
    """SecAgg+ graph degree: classic SecAgg (everyone) up to 17 clients, else max(16, 2·⌈log2 n⌉ + 4)."""
    return max(1, min(cohort - 1, max(16, 2 * math.ceil(math.log2(max(cohort, 2))) + 4)))


class SecAggRound:
    """The engine's secure-aggregation side: one `SecAggServer` per round, durable, driven phase by phase."""

    def __init__(
        self,
        run: SecureRun,
        *,
        config: CoordinatorConfig,
        store: StateStore,
        registry: Capabilities,
        length: int,
        dp: DPClipState | None,
        combiner: Combiner,
    ) -> None:
        self.run, self.config, self.store, self.registry, self.length, self.dp = (
            run,
            config,
            store,
            registry,
            length,
            dp,
        )
        self.server: SecAggServer | None = None
        self.round = 0
        self.task: SecAggTask | None = None
        self._task_bytes = b""
        self.result: SecAggResult | None = None
        self.lock = threading.Lock()
        self.record = SecAggRecord(store.dir / "secagg", self.lock, lambda: (self.active, self.round))
        self.closing = False  # a phase close is being made durable (see _close)
        self.phase_changed = asyncio.Event()  # what held steps wait for (see steps.hold, wake)
        self.steps = SecAggSteps(self)
        self.exclusions = Exclusions(store.dir / "secagg" / "excluded.json")
        self._unusable = ""  # why the open attempt's cohort cannot run the protocol (see round_opened)
        if not isinstance(combiner, SecureSum):
            raise SecAggError(f"secure aggregation needs the secure-sum combiner, the strategy has {combiner.name!r}")
        combiner.bind(self)

    async def persist(self, with_sum: bool = False) -> None:
        """The protocol state durable before this returns (group commit: `SecAggRecord.persist`)."""
        await self.record.persist(with_sum)

    def _use(self, server: SecAggServer, round: int) -> None:
        cfg, dp = self.config, self.dp
        self.server, self.round, self.result = server, round, None
        n = len(server.params.cohort)
        bits = server.params.fixed_point.bits
        self.task = SecAggTask(
            server.params,
            "unit" if dp else "examples",
            dp.clip if dp else None,
            distributed_noise_std(dp.noise_multiplier, dp.clip, n) if dp else 0.0,
            packed_codec(bits) if bits % 8 == 0 else SECAGG_CODEC,
        )
        self._task_bytes = self.task.to_bytes()
        log.info(
            "round %d: secure aggregation over %d clients, %d neighbours each, threshold %d, %d-bit sums, scheme %s%s",
            round,
            n,
            effective_degree(n, server.params.degree),
            server.params.threshold,
            server.params.fixed_point.bits,
            server.params.scheme,
            f", distributed DP z={dp.noise_multiplier:g} C={dp.clip:g}"
            if dp and cfg.privacy.dp_noise_multiplier
            else "",
        )

    def ensure(self, round: int) -> SecAggServer:
        """The round's protocol state, from the state dir after a restart (SecAggError if none)."""
        if self.server is None or self.round != round:
            server = self.record.load(round)
            if server is None:
                raise SecAggError(f"no secure-aggregation state for round {round}")
            self._use(server, round)
        return self.active

    @property
    def active(self) -> SecAggServer:
        """The protocol state of the round in progress (set once a round opened or was resumed)."""
        return present(self.server, "the secure-aggregation state")

    def round_opened(self) -> None:
        """A new attempt opened: resume the recorded protocol state, or start a fresh one for its cohort."""
        r = present(self.run.training, "the open round")
        server = self.server if self.round == r.round and self.server is not None else self.record.load(r.round)
        if server is not None and server.phase is not Phase.FAILED:
            self._use(server, r.round)
            log.info("round %d: secure aggregation resumed in phase %s", r.round, server.phase.value)
            return
        cfg, n = self.config, len(r.selected)
        degree = cfg.privacy.secagg_neighbours or default_degree(n)
        threshold = cfg.privacy.secagg_threshold or default_threshold(effective_degree(n, degree))
        dp, caps = self.dp, [self.registry.capabilities(c) for c in r.selected]
        scheme = negotiate(caps)  # every selected device computes it
        cap = 1.0 if dp else MAX_WEIGHT if scheme == LEGACY else weight_cap(caps)  # older devices clamp at MAX_WEIGHT
        fixed = FixedPoint.for_cohort(max(n, 1), cfg.privacy.secagg_clip, cfg.privacy.secagg_scale, cap)
        fixed = replace(fixed, bits=min(64, -(-fixed.bits // 8) * 8))  # whole bytes: packed words waste no bit
        try:
            params = SecAggParams(
                r.round * 1000 + r.attempt,
                tuple(r.selected),
                threshold,
                degree,
                os.urandom(16),
                fixed,
                self.length,
                scheme,
            )
        except ConfigError as exc:  # too few clients left (cheaters excluded): `train` fails the round
            self.server, self._unusable = None, f"{n} selected clients cannot run secure aggregation ({exc})"
            return
        self._unusable = ""
        self._use(SecAggServer(params), r.round)
        self.record.begin(r.round)

    def excluded(self) -> frozenset[str]:
        """Clients the next selection must leave out: caught cheaters, and the accused of this round (`exclusion`)."""
        return self.exclusions.excluded(self.run.round)

    async def step(
        self, client_id: str, model_id: str, round: int, step: int, payload: bytes, wait_ms: int
    ) -> tuple[bool, bytes]:
        """One protocol step of `client_id` (`steps.SecAggSteps.step`)."""
        return await self.steps.step(client_id, model_id, round, step, payload, wait_ms)

    def may_fit(self, client_id: str) -> bool:
        """A FIT task only while keys are still collected, to a client that has not advertised yet."""
        s = self.server
        return s is not None and s.phase is Phase.ADVERTISE and client_id not in s.state.keys

    def task_bytes(self) -> bytes:
        return self._task_bytes

    @property
    def expected_clients(self) -> int:
        return len(self.active.params.cohort)

    # ---- uploads -------------------------------------------------------------------------------------

    def check_upload(self, h: UpdateHeader) -> None:
        """Before a byte is stored: only masked uploads, only from U2, only while inputs are collected."""
        if not is_masked(h.vector.codec):
            raise ProtocolError(
                f"this run uses secure aggregation: updates must use a masked codec "
                f"({SECAGG_CODEC!r} or 'secagg-packed:b'), got {h.vector.codec!r}; the coordinator "
                f"does not accept clear updates"
            )
        s = self.server
        if s is None or self.round != h.vector.round:
            raise StaleRoundError(f"round {h.vector.round} has no secure aggregation open")
        if s.phase is not Phase.MASKED_INPUT:
            raise StaleRoundError(
                f"round {h.vector.round}: masked inputs are not collected now (phase {s.phase.value})"
            )
        bits = s.params.fixed_point.bits
        if h.vector.codec != SECAGG_CODEC and packed_bits(h.vector.codec) != bits:
            raise VectorError(
                f"round {h.vector.round} sums {bits}-bit masked words: a packed upload must use codec "
                f"{packed_codec(bits)!r} (or {SECAGG_CODEC!r}), got {h.vector.codec!r}"
            )
        if h.client_id not in s.state.u2:
            raise StaleRoundError(
                f"client {h.client_id} did not share keys in round {h.vector.round}; "
                f"its masked input could not be unmasked"
            )

    def receive_masked(self, client_id: str, payload: np.ndarray, codec: str) -> None:
        """Fold one durable masked input, as it arrived in `codec` (fold thread): into the accumulator once."""
        s = self.ensure(self.run.round)
        with self.lock:
            if s.phase is not Phase.MASKED_INPUT and client_id in s.state.u3:
                return  # replayed after a restart: already in the sum
            s.receive_masked_payload(client_id, payload, codec)  # durable in the spool already: nothing written here

    # ---- the phases ----------------------------------------------------------------------------------

    def _note(self, old: Phase, new: Phase, why: str) -> None:
        e = self.run
        log.info("round %d: %s -> %s (%s)", e.round, _PHASE_STATE[old], _PHASE_STATE[new], why)
        self.store.note_transition(TransitionRow(e.round, _PHASE_STATE[old], _PHASE_STATE[new], time.time(), why))
        e.notify()
        self.wake()

    def wake(self) -> None:
        """Wake every held step to look again (a phase closed durably, the round failed, the server is stopping).
        On the event loop."""
        self.phase_changed.set()
        self.phase_changed = asyncio.Event()

    async def _until(self, done: Callable[[], bool], deadline_ms: int) -> None:
        while not done() and (remaining := deadline_ms - now_ms()) > 0:
            await self.run.wait_change(remaining / 1000)

    async def _close(self, close: Callable[[], object], what: str) -> None:
        """Close a phase; its answers (`ready`) wait until the close is durable, so a restart never closes it anew."""
        old = self.active.phase
        self.closing = True
        try:
            with self.lock:
                close()
            await self.persist(with_sum=old is Phase.MASKED_INPUT)
        finally:
            self.closing = False
        self._note(old, self.active.phase, what)

    async def train(self) -> bool:
        """Run the round's remaining phases; False (round and run FAILED, global unchanged) on abort."""
        e, r = self.run, present(self.run.training, "the open round")
        if self._unusable:
            return self._fail(self._unusable)
        s, phase_ms = self.active, int(self.config.plan.round_timeout_s * 1000)
        try:
            if s.phase is Phase.ADVERTISE:
                await self._until(lambda: set(s.state.keys) >= set(s.params.cohort), r.deadline_ms)
                await self._close(s.close_advertise, f"{len(s.state.keys)} of {len(s.params.cohort)} advertised keys")
            if s.phase is Phase.SHARE_KEYS:
                await self._until(lambda: set(s.state.sealed) >= set(s.state.u1), now_ms() + phase_ms)
                await self._close(s.close_share_keys, f"{len(s.state.sealed)} of {len(s.state.u1)} shared keys")
            if s.phase is Phase.MASKED_INPUT:
                await self._until(
                    lambda: set(r.reported) >= set(s.state.u2) and not e.uploads.busy, now_ms() + phase_ms
                )
                r.closing = True
                while e.uploads.busy:
                    await e.wait_change(1.0)
                if e.uploads.fold_error is not None:
                    raise e.uploads.fold_error
                await self._close(s.close_masked_input, f"{len(s.state.u3)} of {len(s.state.u2)} masked inputs")
            if s.phase is Phase.UNMASK:
                await self._until(lambda: set(s.state.responses) >= set(s.state.u3), now_ms() + phase_ms)
                self.result = await asyncio.to_thread(self._finish)
        except SecAggAborted as exc:
            await self.persist()
            self.store.forget_submissions(e.round)
            self.exclusions.learn(e.round, s.state)
            if r.attempt < self.config.plan.max_round_attempts:  # a fresh protocol run (new keys, new cohort)
                log.warning("round %d: attempt %d: %s; the round is retried", e.round, r.attempt, exc)
                shutil.rmtree(self.store.spool_dir(e.round), ignore_errors=True)
                e.uploads.bytes_received.pop(e.round, None)
                e.begin_round()
                e.select(r.attempt + 1)  # without the excluded (`excluded`)
                self.wake()
                return await self.train()
            return self._fail(str(exc))
        finally:
            self.wake()  # held steps see the outcome (or the engine's state) at once
        res = present(self.result, "the unmasked sum")
        self.exclusions.learn(e.round, s.state)  # caught and left out: not in later rounds either
        e.transition(
            RoundState.AGGREGATING,
            f"secure aggregation unmasked the sum of {len(res.survivors)} masked "
            f"inputs ({len(res.dropped)} of the key-sharing clients dropped"
            + (f"; {len(res.cheaters)} caught cheating, their shares left out" if res.cheaters else "")
            + ")",
        )
        return True

    def _fail(self, why: str) -> bool:
        """The round (and run) FAILED with `why`, the global model unchanged."""
        e = self.run
        message = f"round {e.round} failed: {why}; the global model is unchanged"
        self.store.fail_round(e.round, message)
        e.finish(RoundState.FAILED, message)
        return False

    def _finish(self) -> SecAggResult:
        with self.lock:
            return self.active.finish()  # not persisted: a restart redoes it from the UNMASK state
