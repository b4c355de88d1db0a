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
from typing import TYPE_CHECKING

from fedort.common.errors import VectorError
from fedort.common.invariants import present
from fedort.common.round_state import RoundState
from fedort.protos.update_codecs.base import first_non_finite

if TYPE_CHECKING:
    from fedort.coordinator.engine.round_engine import RoundEngine

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


async def commit_or_retry(engine: RoundEngine, defer: bool) -> bool:
    """`engine._commit(defer)`; False once a refused aggregate's round was reopened, or the run failed
    (`engine._finished` tells which)."""
    try:
        await engine._commit(defer)
    except RefusedAggregate as refused:
        retry_refused(engine, str(refused))
        return False
    return True


def retry_refused(engine: RoundEngine, reason: str) -> bool:
    """Discard the open attempt's updates and open the next attempt; False (run FAILED) when none is left."""
    r, cfg = present(engine.training, "the open round"), engine.config
    why = f"round {engine.round}: the aggregate of {len(r.reported)} updates was refused ({reason})"
    engine.store.forget_submissions(engine.round)
    shutil.rmtree(engine.store.spool_dir(engine.round), ignore_errors=True)
    engine.uploads.bytes_received.pop(engine.round, None)
    if engine.secagg is not None or r.attempt >= cfg.plan.max_round_attempts:
        message = f"{why} after {r.attempt} attempt(s); the global model is unchanged"
        engine.store.fail_round(engine.round, message)
        engine.finish(RoundState.FAILED, message)
        return False
    log.warning("%s; its updates were discarded and the round is retried", why)
    attempt = r.attempt
    engine.begin_round()
    engine.select(attempt + 1)
    return True


__all__ = ["RefusedAggregate", "candidate", "commit_or_retry", "retry_refused"]
