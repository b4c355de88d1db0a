"""A round whose candidate global vector is not finite is refused and retried, never committed, never
a FAILED run while attempts remain.

An aggregate can overflow although every update was finite (float32 values near its limit, a huge
server-optimizer step); committing it would hand every device a broken model, and a server
optimizer refuses such a step with VectorError. Then the attempt's updates are discarded (rows and
spool files: nothing of them reaches a later global), the optimizer state is left as it was, and the
round opens a new attempt among the available clients. Only when no attempt is left does the run
fail, saying why; a secure round, whose masked inputs cannot be re-aggregated, fails at once.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable
from typing import Protocol

from fedort.common.errors import VectorError
from fedort.common.round_state import RoundState
from fedort.coordinator.engine.training_round import TrainingRound
from fedort.coordinator.state.store import StateStore
from fedort.protos.update_codecs.base import first_non_finite

log = logging.getLogger(__name__)


class RefusedAggregate(VectorError):
    """The candidate global vector of a round is not finite (or its server-optimizer step is not)."""


async def candidate(aggregator, small: bool):
    """The round's aggregation result (`small`: computed on the loop, else in a thread); RefusedAggregate if
    the aggregation raised VectorError or its vector holds a NaN or an Inf."""
    try:
        result = aggregator.result() if small else await asyncio.to_thread(aggregator.result)
    except VectorError as e:
        raise RefusedAggregate(str(e)) from e
    bad = first_non_finite(result.vector)
    if bad is not None:
        raise RefusedAggregate(f"the aggregate holds a non-finite value ({result.vector[bad]}) at position {bad}")
    return result


async def commit_or_retry(commit: Callable[[], Awaitable[object]], retry: Callable[[str], object]) -> bool:
    """`commit()`; False once it refused the aggregate and `retry(reason)` reopened the round or failed the run."""
    try:
        await commit()
    except RefusedAggregate as refused:
        retry(str(refused))
        return False
    return True


class Reopened(Protocol):
    """What a refused aggregate does to the run: the round's fresh bookkeeping and a new attempt, or the end."""

    def begin_round(self) -> TrainingRound: ...

    def select(self, attempt: int) -> None: ...

    def finish(self, state: RoundState, message: str) -> None: ...


def retry_refused(
    run: Reopened,
    r: TrainingRound,
    reason: str,
    *,
    store: StateStore,
    bytes_received: dict[int, int],
    max_attempts: int,
    secure: bool,
) -> bool:
    """Discard the open attempt's updates (rows, spool, received bytes) and open the next attempt; False (run
    FAILED) when none is left of `max_attempts`, or at once for a `secure` round (its inputs are gone)."""
    why = f"round {r.round}: the aggregate of {len(r.reported)} updates was refused ({reason})"
    store.forget_submissions(r.round)
    shutil.rmtree(store.spool_dir(r.round), ignore_errors=True)
    bytes_received.pop(r.round, None)
    if secure or r.attempt >= max_attempts:
        message = f"{why} after {r.attempt} attempt(s); the global model is unchanged"
        store.fail_round(r.round, message)
        run.finish(RoundState.FAILED, message)
        return False
    log.warning("%s; its updates were discarded and the round is retried", why)
    run.begin_round()
    run.select(r.attempt + 1)
    return True


__all__ = ["RefusedAggregate", "Reopened", "candidate", "commit_or_retry", "retry_refused"]
