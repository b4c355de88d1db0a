"""The run's life cycle: one explicit state machine, each transition logged and recorded, and the change signal.

    WAITING_FOR_CLIENTS --> TRAINING --> AGGREGATING --> EXPORTING --> WAITING_FOR_CLIENTS (next round)
                               |  ^                          |------> EVALUATING --> DONE
                               +--+ retry (attempt + 1)      +------> DONE
    any state --> FAILED (a round without quorum after max_round_attempts, or an unplanned error)

Every transition is logged and recorded (with its time) in the state database; one the life cycle
does not connect raises `IllegalTransition` naming both states. Every change wakes whatever waits
in `wait_change` (the long-polls and the engine loop).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from fedort.common.errors import FedortError
from fedort.common.round_state import RoundRowState, RoundState
from fedort.coordinator.state.schema import TransitionRow
from fedort.coordinator.state.store import StateStore

log = logging.getLogger("fedort.coordinator.engine.round_engine")

S = RoundState
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


class LifeCycle:
    """The run's state and, once it ended, its outcome; only the engine's event loop moves it."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.state = RoundState.WAITING_FOR_CLIENTS
        self.outcome: RunOutcome | None = None
        self._changed = asyncio.Event()
        self._finished = asyncio.Event()

    def transition(self, round: int, new: RoundState, why: str = "") -> None:
        """Move to `new` in round `round` (IllegalTransition names both states if the life cycle does not allow it)."""
        if new not in _ALLOWED[self.state]:
            raise IllegalTransition(f"illegal round transition from {self.state.name} to {new.name} (round {round})")
        log.info("round %d: %s -> %s%s", round, self.state.name, new.name, f" ({why})" if why else "")
        self.store.note_transition(TransitionRow(round, self.state.name, new.name, time.time(), why))
        self.state = new
        self.notify()

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
    def finished(self) -> bool:
        return self._finished.is_set()

    def finish(self, round: int, state: RoundState, message: str) -> None:
        """End the run in round `round` in `state` (DONE or FAILED) saying why, through a transition."""
        if state is RoundState.FAILED:
            log.error("run failed: %s", message)
        self.transition(round, state, message)
        done = sum(1 for r in self.store.rounds() if RoundRowState(r.state).committed)
        self.end(RunOutcome(state, done, message))

    def end(self, outcome: RunOutcome) -> None:
        """The run ended with `outcome` (in its final state: entered by a transition, or set here after an
        unplanned error)."""
        self.state = outcome.state
        self.outcome = outcome
        self._finished.set()

    def fail(self, round: int, message: str) -> None:
        """An unplanned error ended the run in round `round`: FAILED recorded as far as the disk allows (the
        transition with fail_round's transaction), and in memory whatever happened."""
        if not self.state.final:
            self.store.note_transition(
                TransitionRow(round, self.state.name, RoundState.FAILED.name, time.time(), message)
            )
        try:
            self.store.fail_round(round, message)
        except Exception as record_error:  # noqa: BLE001 - e.g. disk full: the run still ends FAILED in memory
            log.error("could not record the failure in %s: %s", self.store.dir, record_error)
        finally:
            self.end(RunOutcome(RoundState.FAILED, round - 1, message))
            self.notify()

    async def wait_done(self) -> RunOutcome:
        await self._finished.wait()
        assert self.outcome is not None
        return self.outcome
