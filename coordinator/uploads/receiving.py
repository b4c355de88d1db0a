"""Receiving an admitted update into a temp spool file: the step both update intakes share.

An upload holds one of the run's upload slots (`slots`) only while it makes progress (`progress`: a
minimum rate over every window, and a deadline of upload_grace_s + payload_bytes /
upload_min_rate_bytes_s, never past the round's deadline; RESOURCE_EXHAUSTED, the device may retry);
the monitor counts the bytes received and the slots in use. A co-located device's file is taken
instead of streamed (`colocated.local_vectors`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fedort.coordinator.colocated.local_vectors import EarlyFold, TakenFile, local_file_received
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.rpc.monitoring import Monitoring
from fedort.coordinator.state.store import now_ms
from fedort.coordinator.uploads.admission import AdmittedUpdate
from fedort.coordinator.uploads.progress import ProgressRule, watch
from fedort.coordinator.uploads.slots import UploadSlots
from fedort.coordinator.uploads.spool_free import FreeSpoolFiles
from fedort.coordinator.uploads.stream import UpdateReceiver


@asynccontextmanager
async def received(
    admitted: AdmittedUpdate,
    tmp: Path,
    chunks: AsyncIterator[bytes],
    *,
    slots: UploadSlots,
    slot_round: int,
    config: CoordinatorConfig,
    monitor: Monitoring,
    inline_max: int = 0,
    free: FreeSpoolFiles | None = None,
    early: Callable[[], EarlyFold | None] = lambda: None,
    until_ms: int | None = None,
) -> AsyncIterator[UpdateReceiver | TakenFile]:
    """Receive an admitted update into the temp spool file `tmp` under an upload slot and the
    whole-upload deadline; the body runs once all bytes arrived, checked and fsynced (slot already
    released; a payload of at most `inline_max` bytes is in `receiver.payload` and not fsynced), and
    must rename `tmp` into place to keep it. `slots.abort_round(slot_round)` cuts it short, and so does
    falling behind `upload_progress` (`until_ms`: the round's deadline, which the upload never outlives).
    A header naming a co-located device's file instead of chunks goes to `coordinator.local_vectors`
    (which may fold it while checking it: `early`), and is not fsynced there: the body must fsync a
    `TakenFile` before it acknowledges (the group commit does, `Arrival.sync`)."""
    if admitted.header.local_file:
        async with local_file_received(admitted, tmp, chunks, config.transport.local_vector_dir, early) as taken:
            yield taken
        return
    cfg = config
    slot = await slots.acquire(admitted.header.client_id, slot_round, cfg.uploads.upload_slot_wait_s)
    rule = ProgressRule(
        cfg.uploads.upload_min_rate_bytes_s, cfg.uploads.upload_rate_window_s, cfg.uploads.upload_grace_s
    )
    deadline = rule.deadline_s(admitted.payload_bytes)
    round_left = None if until_ms is None else (until_ms - now_ms()) / 1000
    recv: asyncio.Future | None = None
    receiver: UpdateReceiver | None = None
    try:
        receiver = UpdateReceiver(admitted, tmp, cfg.uploads.max_chunk_bytes, inline_max, free)
        bind = getattr(chunks, "bind_receiver", None)  # a resumable upload's parts (resumable_uploads.PartFeed)
        if bind is not None:
            bind(receiver)

        async def receive() -> None:
            async for chunk in chunks:
                receiver.add(chunk)
                monitor.bytes_in(len(chunk))
            await receiver.finish()

        # The receive loop runs as its own task so that the round's close (slots.abort_round) and the
        # whole-upload deadline can cut it short without cancelling the handler (Python 3.10 has no
        # Task.uncancel).
        recv = asyncio.ensure_future(receive())
        slot.task = recv
        async with monitor.upload_slot():
            await watch(recv, lambda: receiver.received, admitted.payload_bytes, rule, deadline, round_left)
        if recv.cancelled() and slot.abort is not None:
            raise slot.abort
        recv.result()
        slots.release(slot)
        yield receiver
    finally:
        if recv is not None and not recv.done():
            recv.cancel()
        slots.release(slot)
        if receiver is not None:
            receiver.close()
