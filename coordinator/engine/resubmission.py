"""An update sent again after its round closed: was it counted then (a duplicate) or never (stale)?

A device that lost the answer to an upload (it crashed, or the acknowledgement was lost and the
round closed before its retry arrived) sends the same update again. While the round is open the
intake answers `duplicate` for a counted one; after it closed the intake refuses it as stale
(FAILED_PRECONDITION), which alone cannot tell "counted, then the round closed" from "never
counted". So before that refusal leaves, this looks the update up: the client's submission row of
that round (for the asynchronous mode, the buffer its ledger row names) whose stored payload
digest equals the header's is the same update, already counted, and the answer is `duplicate`.
Since protocol 1.4 a FAILED_PRECONDITION to a resent update therefore means it did not count —
what a top-k device needs to settle its error-feedback residual (edge_client/uploads/update_codec.py).
A header without a digest value (a co-located first attempt, protocol 1.6) matches nothing here:
a resend carries its digest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from fedort.common import digests
from fedort.common.errors import StaleRoundError
from fedort.coordinator.rpc.monitoring import Monitoring
from fedort.coordinator.state.store import StateStore
from fedort.protos.messages import SubmitResult, UpdateHeader


class Resubmitted(Protocol):
    """What answering a resent update uses of the engine (`RoundEngine` offers it)."""

    @property
    def store(self) -> StateStore: ...

    @property
    def monitor(self) -> Monitoring: ...

    def counted_round(self, client_id: str, round: int) -> int | None:
        """The round that counted the client's update trained on `round` (the asynchronous mode's buffer)."""
        ...

    async def submit_update(self, header: UpdateHeader, chunks: AsyncIterator[bytes]) -> SubmitResult: ...


def counted_before(engine: Resubmitted, h: UpdateHeader) -> SubmitResult | None:
    """The duplicate answer if `h` re-sends an update this run already counted, else None (one indexed read)."""
    round = engine.counted_round(h.client_id, h.vector.round)
    if round is None:
        return None
    stored = engine.store.submission_digest(round, h.client_id)
    if stored is None or stored != digests.stored(h.vector.digest, h.vector.sha256):
        return None
    engine.monitor.update_accepted(duplicate=True)
    return SubmitResult(
        True, True, h.vector.round, f"duplicate: this update was counted in round {round}, which has closed"
    )


async def submit_counted_once(engine: Resubmitted, h: UpdateHeader, chunks: AsyncIterator[bytes]) -> SubmitResult:
    """`engine.submit_update`, except that an update refused as stale which this run counted before answers
    `duplicate` (its chunks drained, as an open round's duplicate is)."""
    try:
        return await engine.submit_update(h, chunks)
    except StaleRoundError:
        result = counted_before(engine, h)
        if result is None:
            raise
        async for _ in chunks:
            pass
        return result


__all__ = ["Resubmitted", "counted_before", "submit_counted_once"]
