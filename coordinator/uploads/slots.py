"""Upload slots: how many updates are received at once, and why one device cannot starve the others.

    at most `total` uploads receive at once (FIFO queue behind them), at most `per_client` per client
    a queued upload waits at most `wait_s` for a slot          -> UNAVAILABLE (the device retries)
    a client over its share is refused at once                -> UNAVAILABLE
    the round an upload (or a queued one) targets closes      -> FAILED_PRECONDITION, slot released

Together with the whole-upload deadline (uploads.py: grace + payload bytes / minimum rate) and
the per-message idle timeout, a hostile device that opens uploads and trickles or goes silent
holds at most its share of slots, for a bounded time, and never past its round's close.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from fedort.common.errors import FedortError, UnavailableError
from fedort.common.invariants import present


@dataclass(eq=False)
class Slot:
    """One upload holding (or waiting for) a slot; `abort` is set when it was cut short from outside."""

    client_id: str
    round: int
    task: asyncio.Task | None
    abort: FedortError | None = None
    granted: asyncio.Future | None = field(default=None, repr=False)


class UploadSlots:
    """The coordinator's upload slots (see the module docstring). Event-loop only."""

    def __init__(self, total: int, per_client: int) -> None:
        self.total = total
        self.per_client = per_client
        self.holders: list[Slot] = []
        self._queue: deque[Slot] = deque()

    @property
    def in_use(self) -> int:
        return len(self.holders)

    @property
    def waiting(self) -> int:
        return len(self._queue)

    async def acquire(self, client_id: str, round: int, wait_s: float) -> Slot:
        """A slot for one upload of `client_id` to `round` (UnavailableError if over share or none within wait_s)."""
        mine = sum(s.client_id == client_id for s in self.holders) + sum(s.client_id == client_id for s in self._queue)
        if mine >= self.per_client:
            raise UnavailableError(
                f"client {client_id} already has {mine} upload(s) in progress, at most "
                f"{self.per_client} per client; retry once it ended"
            )
        slot = Slot(client_id, round, asyncio.current_task())
        if len(self.holders) < self.total and not self._queue:
            self.holders.append(slot)
            return slot
        slot.granted = asyncio.get_running_loop().create_future()
        self._queue.append(slot)
        try:
            await asyncio.wait({slot.granted}, timeout=wait_s)
        except BaseException:  # the caller went away while queued
            if not slot.granted.done():
                self._queue.remove(slot)
                slot.granted.cancel()
            elif not slot.granted.cancelled() and slot.granted.exception() is None:
                self.release(slot)  # granted just now: hand it on
            raise
        if not slot.granted.done():
            self._queue.remove(slot)
            slot.granted.cancel()
        if slot.granted.cancelled():
            raise UnavailableError(
                f"all {self.total} upload slots stayed busy for {wait_s:g} s (upload_slot_wait_s); retry later"
            )
        slot.granted.result()  # raises the abort error of a round that closed while queued
        return slot

    def release(self, slot: Slot) -> None:
        """Give the slot back and hand it to the next queued upload."""
        if slot in self.holders:
            self.holders.remove(slot)
        while self._queue and len(self.holders) < self.total:
            nxt = self._queue.popleft()
            self.holders.append(nxt)
            present(nxt.granted, "a queued slot's grant").set_result(None)

    def abort_round(self, round: int, error: FedortError) -> int:
        """Cut short every upload to `round`, receiving or queued (`error` is what they answer); how many."""
        cut = 0
        for slot in [s for s in self._queue if s.round == round]:
            self._queue.remove(slot)
            present(slot.granted, "a queued slot's grant").set_exception(error)
            cut += 1
        for slot in [s for s in self.holders if s.round == round and s.abort is None]:
            slot.abort = error
            if slot.task is not None:
                slot.task.cancel()
            cut += 1
        return cut
