"""When an open training round closes: all selected clients reported, or its deadline passed.

    close at  min(first t with selected ⊆ reported and |reported| ≥ min_clients,  deadline)

Once closing, no new update is admitted, but updates already being stored or folded are waited
for and counted. Whether the closed round aggregates, is retried (a new attempt and deadline) or
fails the run is the round engine's decision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedort.common.invariants import present
from fedort.coordinator.state.store import now_ms

if TYPE_CHECKING:
    from fedort.coordinator.engine.round_engine import RoundEngine


async def wait_for_close(engine: RoundEngine) -> None:
    """Until the open round is complete or past its deadline, then until no update is in flight."""
    r, min_clients = present(engine.training, "the open round"), engine.config.plan.min_clients
    while not r.complete(min_clients) and (remaining := r.deadline_ms - now_ms()) > 0:
        await engine.wait_change(remaining / 1000)
    r.closing = True  # no new update is accepted from here on ...
    engine.uploads.round_closed(r.round)  # (uploads still receiving for it are cut short, freeing their slots)
    while engine.uploads.busy:  # ... but those being stored or folded are counted
        await engine.wait_change(1.0)
    if engine.uploads.fold_error is not None:
        raise engine.uploads.fold_error
