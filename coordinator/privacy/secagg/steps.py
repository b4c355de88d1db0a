"""The `SecAgg` RPC of a secure round: check a step, record its message, hold it until its phase
closed durably, answer it (see SecAggRequest.Step in protos/fedort_v1.proto).

Each step's message is recorded at most once per phase (a re-send changes nothing) and is durable
before the client hears that it counted: a step answered at once (an unmask response) is written
first; a held one (keys, shares) is answered only after its phase closed, and the close writes every
message recorded before it (`SecAggRound._close`), so it is not written on its own. A step whose hold
runs out is answered "not ready" and sent again, so a restart in between loses nothing. A held step
wakes when a phase closes, the round ends or the server stops (`SecAggRound.wake`), not at every
engine change.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from fedort.common.errors import ProtocolError, StaleRoundError
from fedort.common.round_state import RoundState
from fedort.common.secagg import AdvertiseKeys, SecAggAborted, ShareKeys, UnmaskResponse
from fedort.common.secagg.phases import Phase
from fedort.coordinator.privacy.secagg.server import SecAggServer

if TYPE_CHECKING:
    from fedort.coordinator.privacy.secagg.secure_round import SecAggRound

ADVERTISE, SHARE, UNMASK_REQUEST, UNMASK = 0, 1, 2, 3  # SecAggRequest.Step


class SecAggSteps:
    """The protocol steps of the round `rnd` runs (its server, lock, durable record and phase events)."""

    def __init__(self, rnd: SecAggRound) -> None:
        self.rnd = rnd

    async def step(
        self, client_id: str, model_id: str, round: int, step: int, payload: bytes, wait_ms: int
    ) -> tuple[bool, bytes]:
        """One protocol step of `client_id` (see SecAggRequest.Step): (ready, reply payload)."""
        s = self.check(client_id, model_id, round)
        if self.accept(client_id, step, payload):
            await self.recorded(s, [step])
        if not await self.hold(s, [step], wait_ms):
            return False, b""
        return True, self.reply(client_id, round, step)

    def check(self, client_id: str, model_id: str, round: int) -> SecAggServer:
        """The round's protocol state, if `round` is the one in progress (StaleRoundError, SecAggAborted)."""
        e = self.rnd.run
        e.touch(client_id)
        e.check_model(model_id)
        if (
            e.state is not RoundState.TRAINING
            or self.rnd.server is None
            or self.rnd.round != round
            or e.training is None
        ):
            raise StaleRoundError(
                f"round {round} has no secure aggregation in progress (round {e.round}, state {e.state.name})"
            )
        if self.rnd.server.phase is Phase.FAILED:
            raise SecAggAborted(self.rnd.server.state.reason)
        return self.rnd.server

    def accept(self, client_id: str, step: int, payload: bytes) -> bool:
        """Record the step's message if its phase is open (a re-send changes nothing): True if the state changed."""
        s = self.rnd.active
        if step == ADVERTISE:
            msg = _parse(AdvertiseKeys, payload, client_id)
            if s.phase is Phase.ADVERTISE and s.state.keys.get(client_id) != msg:
                with self.rnd.lock:
                    s.receive_keys(msg)
                return True
        elif step == SHARE:
            msg = _parse(ShareKeys, payload, client_id)
            if s.phase is Phase.SHARE_KEYS and s.state.sealed.get(client_id) != dict(msg.sealed):
                with self.rnd.lock:
                    s.receive_shares(msg)
                return True
        elif step == UNMASK:
            msg = _parse(UnmaskResponse, payload, client_id)
            if s.phase is Phase.UNMASK and client_id not in s.state.responses:
                with self.rnd.lock:
                    s.receive_unmask(msg)
                return True
        elif step != UNMASK_REQUEST:
            raise ProtocolError(f"unknown secagg step {step}; expected 0..3 (ADVERTISE, SHARE, UNMASK_REQUEST, UNMASK)")
        return False

    async def recorded(self, s: SecAggServer, steps: list[int]) -> None:
        """After messages of `steps` were recorded: durable now if one is answered at once (else the phase
        close writes them before their answer, see the module docstring); the engine looks again."""
        if not all(self.waits_for_close(s, x) for x in steps):
            await self.rnd.persist()
        self.rnd.run.notify()

    def waits_for_close(self, s: SecAggServer, step: int) -> bool:
        """Whether `step` is answered only once its phase closed: keys and shares while they are collected."""
        return (step == ADVERTISE and s.phase is Phase.ADVERTISE) or (step == SHARE and s.phase is Phase.SHARE_KEYS)

    def ready(self, s: SecAggServer, step: int) -> bool:
        """Whether `step` can be answered: the phase it waits for has closed, durably (UNMASK: at once)."""
        if self.rnd.closing:
            return False
        if step == ADVERTISE:
            return s.phase is not Phase.ADVERTISE
        if step == SHARE:
            return s.phase not in (Phase.ADVERTISE, Phase.SHARE_KEYS)
        return s.phase in (Phase.UNMASK, Phase.DONE) if step == UNMASK_REQUEST else True

    async def hold(self, s: SecAggServer, steps: list[int], wait_ms: int) -> bool:
        """Until one of `steps` is ready or min(wait_ms, 30 s) ran out; SecAggAborted if the round failed meanwhile.

        Woken by `wake` (phase closes, the round's end, the server stopping), not by every engine change: in the
        masked-input phase each upload notifies the engine two or three times, and every held call would wake for
        each."""
        e = self.rnd.run
        until = time.monotonic() + min(max(wait_ms, 0), 30_000) / 1000
        while not any(self.ready(s, x) for x in steps) and (left := until - time.monotonic()) > 0 and not e.stopping:
            changed = asyncio.ensure_future(self.rnd.phase_changed.wait())
            try:
                await asyncio.wait({changed}, timeout=left)
            finally:
                changed.cancel()
        if s.phase is Phase.FAILED:
            raise SecAggAborted(s.state.reason)
        return any(self.ready(s, x) for x in steps)

    def reply(self, client_id: str, round: int, step: int) -> bytes:
        """The answer to a ready step: the roster, the share delivery, the unmask request, or nothing."""
        s = self.rnd.active
        if step == ADVERTISE:
            _member(client_id, s.state.u1, round, "advertise its keys in time")
            return s.roster_for(client_id).to_bytes()
        if step == SHARE:
            _member(client_id, s.state.u2, round, "share its keys in time")
            return s.delivery_bytes(client_id)
        if step == UNMASK_REQUEST:
            _member(client_id, s.state.u3, round, "send its masked input in time")
            return s.unmask_request().to_bytes()
        return b""


def _member(client_id: str, members: list[str], round: int, what: str) -> None:
    if client_id not in members:
        raise StaleRoundError(
            f"client {client_id} is no longer part of round {round}'s secure aggregation: it did not {what}"
        )


def _parse(cls, payload: bytes, client_id: str):
    try:
        msg = cls.from_bytes(payload)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"secagg payload is not a valid {cls.__name__}: {exc}") from None
    if msg.client_id != client_id:
        raise ProtocolError(f"secagg {cls.__name__} names client {msg.client_id!r}, the request {client_id!r}")
    return msg
