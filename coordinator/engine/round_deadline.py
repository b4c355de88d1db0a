"""When an open training round closes: all selected clients reported, or its deadline passed.

    close at  min(first t with selected ⊆ reported and |reported| ≥ min_clients,  deadline)

Once closing, no new update is admitted, but updates already being stored or folded are waited
for and counted. Whether the closed round aggregates, is retried (a new attempt and deadline) or
fails the run is the round engine's decision.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from fedort.coordinator.engine.training_round import TrainingRound
from fedort.coordinator.state.store import now_ms


class InFlight(Protocol):
    """What the close asks of the update intake (`uploads.intake.UploadIntake` offers it)."""

    @property
    def busy(self) -> bool: ...

    @property
    def fold_error(self) -> BaseException | None: ...

    def round_closed(self, round: int) -> None: ...


async def wait_for_close(
    r: TrainingRound, uploads: InFlight, wait_change: Callable[[float], Awaitable[None]], min_clients: int
) -> None:
    """Until the open round `r` is complete or past its deadline, then until no update is in flight
    (`wait_change(timeout)`: until the run changes)."""
    while not r.complete(min_clients) and (remaining := r.deadline_ms - now_ms()) > 0:
        await wait_change(remaining / 1000)
    r.closing = True  # no new update is accepted from here on ...
    uploads.round_closed(r.round)  # (uploads still receiving for it are cut short, freeing their slots)
    while uploads.busy:  # ... but those being stored or folded are counted
        await wait_change(1.0)
    if uploads.fold_error is not None:
        raise uploads.fold_error
