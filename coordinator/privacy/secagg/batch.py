"""SecAgg steps of many clients in one call (the SecAggBatch RPC, protocol 1.3).

A simulation worker hosts many clients of one cohort, and every protocol phase sends one step
per client at about the same time: one SecAgg call each meant ~400 held RPCs per 100-client round,
each woken by every message of the phase. A batch is handled as its calls would be, only once:
every entry's message is recorded (`SecAggSteps.accept`), made durable as its own call's would be
(`SecAggSteps.recorded`: one group-committed write for the batch, where an entry is answered at once),
the call is held until any entry is ready (its phase closed), and then every entry is answered —
ready with its reply, not ready (the client sends it again), or the error its own call would have got.
A batch with a failed entry is not held, so the failure reaches its device at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedort.common.errors import FedortError, ProtocolError, StaleRoundError

if TYPE_CHECKING:
    from fedort.coordinator.privacy.secagg.secure_round import SecAggRound

MAX_BATCH_STEPS = 10_000


@dataclass(frozen=True)
class StepCall:
    """One entry of a batch: what one SecAgg call carries."""

    client_id: str
    model_id: str
    round: int
    step: int
    payload: bytes


@dataclass(frozen=True)
class StepAnswer:
    """ready + payload, or the error (a FedortError) that step's own call would have raised."""

    client_id: str
    ready: bool = False
    payload: bytes = b""
    error: FedortError | None = None


async def run_batch(secagg: SecAggRound | None, calls: Sequence[StepCall], wait_ms: int) -> list[StepAnswer]:
    """Every entry of one SecAggBatch call, answered in order (see the module docstring)."""
    if len(calls) > MAX_BATCH_STEPS:
        raise ProtocolError(f"SecAggBatch carries {len(calls)} steps; at most {MAX_BATCH_STEPS} per call")
    errors: dict[int, FedortError] = {}
    live: list[int] = []
    changed, server = False, None
    for i, c in enumerate(calls):
        try:
            if secagg is None:
                raise StaleRoundError("this run does not use secure aggregation (no --secagg)")
            server = secagg.steps.check(c.client_id, c.model_id, c.round)
            changed |= secagg.steps.accept(c.client_id, c.step, c.payload)
            live.append(i)
        except FedortError as exc:
            errors[i] = exc
    if secagg is None:  # every entry failed above
        return [StepAnswer(c.client_id, error=errors[i]) for i, c in enumerate(calls)]
    if changed and server is not None:
        await secagg.steps.recorded(server, [calls[i].step for i in live])
    if live and not errors and server is not None:
        try:
            await secagg.steps.hold(server, [calls[i].step for i in live], wait_ms)
        except FedortError as exc:  # the round failed while held: every entry hears why
            errors.update({i: exc for i in live})
    out = []
    for i, c in enumerate(calls):
        if i in errors:
            out.append(StepAnswer(c.client_id, error=errors[i]))
        elif server is None or not secagg.steps.ready(server, c.step) or secagg.server is not server:
            out.append(StepAnswer(c.client_id))
        else:
            try:
                out.append(StepAnswer(c.client_id, True, secagg.steps.reply(c.client_id, c.round, c.step)))
            except FedortError as exc:
                out.append(StepAnswer(c.client_id, error=exc))
    return out
