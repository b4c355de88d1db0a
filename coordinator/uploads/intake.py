"""Accepting an update: admission, a slot, the upload stream into the spool, durability, then the aggregator.

    header, chunks ──admit──▶ slot ──▶ UpdateReceiver (spool temp file, sha256, streaming decode check)
                   ──▶ group commit: renames + folder fsync, SQLite rows ──▶ acknowledged ──▶ fold: decode the spool file into the aggregator

An update counts (and is acknowledged) once its spool file and its row are durable; the fold
into the round's aggregator then runs in one worker thread (streaming combiners are not
thread-safe), decoding the spooled payload (memory-mapped) with its codec, and the round cannot
close before every fold finished. Durability is a group commit (`arrival_commit`): updates that
finish receiving together share one folder fsync and one SQLite transaction, off the event loop.
Memory: a receiving upload holds one chunk at a time, and acknowledged updates wait to be folded
as spool files (the fold thread maps one at a time), so the coordinator stays
O(P + concurrent uploads × chunk). A co-located raw update is checked in the fold thread and folded
as it is read, before its group commit (`local_vectors`, `early_fold`); if it then is not counted,
the round's close refolds what was (`RoundAggregator.stale`).

Bounded in time as well (starvation): an upload holds one of the run's upload slots
(`upload_slots`) only while it makes progress (`upload_progress`: a minimum rate over every
window, and a deadline of upload_grace_s + payload_bytes / upload_min_rate_bytes_s, never past
the round's deadline; RESOURCE_EXHAUSTED, the device may retry), and never past the close of
the round it targets (FAILED_PRECONDITION).
The engine's monitor counts the bytes received, the slots in use and each update accepted or
found a duplicate (a refusal is counted where the RPC fails, in the servicer's error boundary).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from fedort.common import digests
from fedort.common.errors import ProtocolError, StaleRoundError
from fedort.common.secagg.pack import is_masked
from fedort.coordinator.aggregation import Update
from fedort.coordinator.colocated.local_vectors import EarlyFold, TakenFile, local_file_received, with_taken_digest
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.engine.round_metrics import metrics_json
from fedort.coordinator.state.schema import SubmissionRow
from fedort.coordinator.state.store import now_ms
from fedort.coordinator.uploads.admission import AdmittedUpdate, admit_update, check_not_pending, check_open
from fedort.coordinator.uploads.arrival_commit import Arrival, ArrivalCommit
from fedort.coordinator.uploads.progress import ProgressRule, watch
from fedort.coordinator.uploads.slots import UploadSlots
from fedort.coordinator.uploads.spool_free import FreeSpoolFiles
from fedort.coordinator.uploads.stream import UpdateReceiver
from fedort.protos.messages import SubmitResult, UpdateHeader

if TYPE_CHECKING:
    from fedort.coordinator.engine.round_engine import RoundEngine
    from fedort.coordinator.rpc.monitoring import Monitoring

log = logging.getLogger(__name__)

T = TypeVar("T")
LOOP_FOLD_BYTES = 256 << 10  # an inline update this small is folded on the event loop (no thread hop)


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


class Uploads:
    """The engine's update intake: one `submit` per upload stream."""

    def __init__(self, engine: RoundEngine) -> None:
        self.engine = engine
        cfg = engine.config
        self.slots = UploadSlots(cfg.uploads.max_concurrent_uploads, cfg.uploads.uploads_per_client)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedort-fold")
        self.commits = ArrivalCommit(
            engine.store,
            cfg.uploads.commit_delay_ms / 1000,
            self._completes_round,
            on_commit=engine.monitor.group_committed,
            copy_inline=not engine.strategy.combiner.streaming,
        )
        self._folds: set[asyncio.Future] = set()
        self._early: set[object] = set()  # co-located updates being checked and folded in the fold thread
        self.fold_error: BaseException | None = None
        self._temp_counter = 0
        self.bytes_received: dict[int, int] = {}  # round -> payload bytes of accepted updates

    @property
    def busy(self) -> bool:
        """Some update is being stored or folded: the open round must not close yet."""
        r = self.engine.training
        return bool(self._folds) or bool(self._early) or (r is not None and bool(r.pending))

    def round_closed(self, round: int) -> None:
        """The round stopped taking updates: cut short every upload still receiving (or queued) for it."""
        n = self.slots.abort_round(
            round, StaleRoundError(f"round {round} closed while this update was being received; it was not counted")
        )
        if n:
            log.info("round %d: closed with %d upload(s) still receiving; they were dropped", round, n)

    async def submit(self, h: UpdateHeader, chunks: AsyncIterator[bytes]) -> SubmitResult:
        """Admit, receive, store and count one update; acknowledged only when this returns."""
        e, cfg = self.engine, self.engine.config
        e.touch(h.client_id)
        check_codec(e, h)
        admitted = admit_update(
            h,
            model_id=e.model_id,
            length=e.length,
            config=cfg,
            state=e.state,
            current=e.round,
            open_round=e.training,
            global_vector=e.global_vector,
            announced=e.registry.capabilities(h.client_id).get("examples"),
        )
        if admitted is None:
            async for _ in chunks:
                pass
            e.monitor.update_accepted(duplicate=True)
            return SubmitResult(True, True, h.vector.round, "duplicate: this update was already counted")
        t0 = time.perf_counter()
        self._temp_counter += 1
        tmp = e.store.layout.spool_temp(h.vector.round, h.client_id, self._temp_counter)
        inline = (
            0 if cfg.uploads.keep_spool else cfg.uploads.inline_update_bytes
        )  # kept spools must stay durable by themselves
        async with received(
            admitted,
            tmp,
            chunks,
            slots=self.slots,
            slot_round=h.vector.round,
            config=cfg,
            monitor=e.monitor,
            inline_max=inline,
            free=e.spool_free,
            early=lambda: self.early_fold(h, tmp),
            until_ms=(e.training.deadline_ms or None) if e.training is not None else None,
        ) as receiver:
            t1 = time.perf_counter()
            folded = tmp if getattr(receiver, "folded", False) else None
            h = with_taken_digest(h, receiver)
            result = await self._accept(
                h, tmp, admitted.payload_bytes, receiver.payload, folded, unsynced=isinstance(receiver, TakenFile)
            )
        e.monitor.update_accepted(duplicate=result.duplicate)
        log.debug(
            "update of %s: %.1f MB received in %.0f ms, stored in %.0f ms",
            h.client_id,
            admitted.payload_bytes / 1e6,
            1000 * (t1 - t0),
            1000 * (time.perf_counter() - t1),
        )
        return result

    def early_fold(self, h: UpdateHeader, token: object) -> EarlyFold | None:
        """How to fold this update while it is checked (`local_vectors`), or None: only into a round still
        open for it, whose aggregator folds float32 blocks, and not under secure aggregation. Asked on the
        event loop, so a round cannot close between this check and the fold counting as `busy`."""
        r, e = self.engine.training, self.engine
        if r is None or r.closing or r.round != h.vector.round or e.secagg is not None or not r.aggregator.folds_early:
            return None
        aggregator, loop = r.aggregator, asyncio.get_running_loop()

        async def run(fn: Callable[[], T]) -> T:
            future = self._pool.submit(fn)  # the fold thread: after the folds queued before it
            self._early.add(future)

            def done(_) -> None:  # only once the thread is done with the sum, even if the call was cancelled
                self._early.discard(future)
                e.notify()

            def from_thread(f) -> None:
                try:
                    loop.call_soon_threadsafe(done, f)
                except RuntimeError:  # the loop is closed: nothing waits any more
                    pass

            future.add_done_callback(from_thread)
            return await asyncio.wrap_future(future)

        return EarlyFold(lambda blocks: aggregator.fold_early(token, blocks, h.num_examples), run)

    async def _accept(
        self,
        h: UpdateHeader,
        tmp: Path,
        nbytes: int,
        payload: bytes | None,
        folded: object = None,
        unsynced: bool = False,
    ) -> SubmitResult:
        """Make a received update durable (group commit; `unsynced`: its file's data too) and count it (the round
        may have closed meanwhile)."""
        e = self.engine
        client, round = h.client_id, h.vector.round
        r = check_open(e.state, e.round, e.training, client, round)
        if client in r.reported:
            return SubmitResult(True, True, round, "duplicate: already counted for this round")
        check_not_pending(r, client)
        path = e.store.spool_path(round, client)
        metrics = metrics_json(h.metrics)
        codec = h.vector.codec or "raw"
        row = SubmissionRow(
            round,
            client,
            h.num_examples,
            metrics,
            digests.stored(h.vector.digest, h.vector.sha256),
            e.store.layout.relative(path),
            now_ms(),
            codec,
            payload,
        )
        r.pending.add(client)  # until the group commit resolves (see counted)
        durable = self.commits.add(Arrival(tmp, path, row, sync=unsynced))

        def counted(f: asyncio.Future) -> None:  # also when this call was cancelled meanwhile: durable means counted
            r.pending.discard(client)
            if not f.cancelled() and f.exception() is None:
                r.record(client, h.num_examples, metrics)
                self.bytes_received[round] = self.bytes_received.get(round, 0) + nbytes
                update = Update(
                    client,
                    h.num_examples,
                    codec,
                    path,  # inline: folded from memory
                    None if payload is None else np.frombuffer(payload, np.uint8),
                )
                if folded is not None:
                    r.aggregator.add(update, early=folded)  # folded while it was checked: only counted here
                elif (
                    payload is not None
                    and len(payload) <= LOOP_FOLD_BYTES
                    and not (self._folds or self._early)
                    and e.secagg is None
                ):
                    self._fold_here(r, update)  # small, and no fold in the thread: microseconds, no hop
                else:
                    fold = asyncio.wrap_future(self._pool.submit(r.aggregator.add, update))
                    self._folds.add(fold)
                    fold.add_done_callback(self._fold_done)
            e.notify()

        durable.add_done_callback(counted)
        await _through_cancellation(durable)
        log.info(
            "round %d: accepted %s update of %s (%d examples, %d bytes; %d of %d selected reported)",
            round,
            codec,
            client,
            h.num_examples,
            nbytes,
            len(r.reported),
            len(r.selected),
        )
        return SubmitResult(True, False, round, "accepted")

    def _fold_here(self, r, update: Update) -> None:
        try:
            r.aggregator.add(update)
        except Exception as err:  # noqa: BLE001 - as a fold in the thread: the round's close raises it
            self.fold_error = err

    def _fold_done(self, fold: asyncio.Future) -> None:
        self._folds.discard(fold)
        if not fold.cancelled() and fold.exception() is not None:
            self.fold_error = fold.exception()
        self.engine.notify()

    def _completes_round(self, group) -> bool:
        """A pending group holds every update the open round still waits for: commit it without more delay."""
        r = self.engine.training
        return r is not None and r.selected <= set(r.reported) | {a.row.client_id for a in group}

    def close(self) -> None:
        self.commits.close()
        self._pool.shutdown(wait=True)


def check_codec(e: RoundEngine, h: UpdateHeader) -> None:
    """Masked uploads exactly when the run uses secure aggregation (never a clear update under --secagg)."""
    if e.secagg is not None:
        e.secagg.check_upload(h)
    elif is_masked(h.vector.codec):
        raise ProtocolError(f"codec {h.vector.codec!r} is for secure aggregation, which this run does not use")


async def _through_cancellation(f: asyncio.Future) -> None:
    """Await `f` even if this task is cancelled meanwhile (then re-raise once it is done): the group commit
    owns the temp spool file until then, and the receiver's cleanup must not remove it under the rename."""
    cancelled = False
    while not f.done():
        try:
            await asyncio.shield(f)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    f.result()
