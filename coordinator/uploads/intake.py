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

Bounded in time as well (starvation): receiving (`receiving.received`, shared with the
asynchronous intake) holds an upload slot only while the upload makes progress, never past the
round's deadline, and never past the close of the round it targets (FAILED_PRECONDITION). The row
an update gets and what counting it records are the shared `accepted.Accepted`.
The engine's monitor counts the bytes received, the slots in use and each update accepted or
found a duplicate (a refusal is counted where the RPC fails, in the servicer's error boundary).
`UploadIntake` is what the engine and the round's close use of an intake (this one or
`fedbuff.uploads.AsyncUploads`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, TypeVar

from fedort.common.errors import ProtocolError, StaleRoundError
from fedort.common.secagg.pack import is_masked
from fedort.coordinator.aggregation import Update
from fedort.coordinator.colocated.local_vectors import EarlyFold, TakenFile, with_taken_digest
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.engine.registry import ClientRegistry
from fedort.coordinator.engine.run_view import RunView
from fedort.coordinator.rpc.monitoring import Monitoring
from fedort.coordinator.state.store import StateStore
from fedort.coordinator.uploads.accepted import Accepted, drained_duplicate
from fedort.coordinator.uploads.admission import admit_update, check_not_pending, check_open
from fedort.coordinator.uploads.arrival_commit import Arrival, ArrivalCommit
from fedort.coordinator.uploads.receiving import received
from fedort.coordinator.uploads.slots import UploadSlots
from fedort.coordinator.uploads.spool_free import FreeSpoolFiles
from fedort.protos.messages import SubmitResult, UpdateHeader

log = logging.getLogger(__name__)

T = TypeVar("T")
LOOP_FOLD_BYTES = 256 << 10  # an inline update this small is folded on the event loop (no thread hop)


class UploadIntake(Protocol):
    """What the engine and its round's close use of an update intake (`Uploads`, `fedbuff.uploads.AsyncUploads`)."""

    bytes_received: dict[int, int]  # round -> payload bytes of accepted updates (taken by the round's export)

    @property
    def busy(self) -> bool:
        """Some update is being stored or folded: the open round must not close yet."""
        ...

    @property
    def fold_error(self) -> BaseException | None:
        """The error of a fold that failed (the round's close raises it)."""
        ...

    def round_closed(self, round: int) -> None:
        """The round stopped taking updates."""
        ...

    async def submit(self, h: UpdateHeader, chunks: AsyncIterator[bytes]) -> SubmitResult:
        """Admit, receive, store and count one update; acknowledged only when this returns."""
        ...

    def close(self) -> None: ...


class MaskedUploads(Protocol):
    """What the intake asks a secure-aggregation round of an upload (`privacy.secagg.secure_round`)."""

    def check_upload(self, h: UpdateHeader) -> None: ...


class Uploads:
    """The synchronous engine's update intake: one `submit` per upload stream, into the open round."""

    def __init__(
        self,
        run: RunView,
        *,
        config: CoordinatorConfig,
        store: StateStore,
        registry: ClientRegistry,
        monitor: Monitoring,
        model_id: str,
        length: int,
        streaming: bool,
        spool_free: FreeSpoolFiles | None = None,
        secagg: MaskedUploads | None = None,
    ) -> None:
        """`streaming`: the round's combiner folds inline updates from memory (their spool files need no copy)."""
        self.run, self.config, self.store, self.registry, self.monitor = run, config, store, registry, monitor
        self.model_id, self.length, self.spool_free, self.secagg = model_id, length, spool_free, secagg
        cfg = config
        self.slots = UploadSlots(cfg.uploads.max_concurrent_uploads, cfg.uploads.uploads_per_client)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedort-fold")
        self.commits = ArrivalCommit(
            store,
            cfg.uploads.commit_delay_ms / 1000,
            self._completes_round,
            on_commit=monitor.group_committed,
            copy_inline=not streaming,
        )
        self._folds: set[asyncio.Future] = set()
        self._early: set[object] = set()  # co-located updates being checked and folded in the fold thread
        self.fold_error: BaseException | None = None
        self._temp_counter = 0
        self.bytes_received: dict[int, int] = {}  # round -> payload bytes of accepted updates

    @property
    def busy(self) -> bool:
        """Some update is being stored or folded: the open round must not close yet."""
        r = self.run.training
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
        run, cfg = self.run, self.config
        self.registry.touch(h.client_id)
        check_codec(self.secagg, h)
        admitted = admit_update(
            h,
            model_id=self.model_id,
            length=self.length,
            config=cfg,
            state=run.state,
            current=run.round,
            open_round=run.training,
            global_vector=run.global_vector,
            announced=self.registry.capabilities(h.client_id).get("examples"),
        )
        if admitted is None:
            return await drained_duplicate(chunks, h.vector.round, self.monitor)
        t0 = time.perf_counter()
        self._temp_counter += 1
        tmp = self.store.layout.spool_temp(h.vector.round, h.client_id, self._temp_counter)
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
            monitor=self.monitor,
            inline_max=inline,
            free=self.spool_free,
            early=lambda: self.early_fold(h, tmp),
            until_ms=(run.training.deadline_ms or None) if run.training is not None else None,
        ) as receiver:
            t1 = time.perf_counter()
            folded = tmp if getattr(receiver, "folded", False) else None
            h = with_taken_digest(h, receiver)
            result = await self._accept(
                h, tmp, admitted.payload_bytes, receiver.payload, folded, unsynced=isinstance(receiver, TakenFile)
            )
        self.monitor.update_accepted(duplicate=result.duplicate)
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
        r, view = self.run.training, self.run
        if (
            r is None
            or r.closing
            or r.round != h.vector.round
            or self.secagg is not None
            or not r.aggregator.folds_early
        ):
            return None
        aggregator, loop = r.aggregator, asyncio.get_running_loop()

        async def run(fn: Callable[[], T]) -> T:
            future = self._pool.submit(fn)  # the fold thread: after the folds queued before it
            self._early.add(future)

            def done(_) -> None:  # only once the thread is done with the sum, even if the call was cancelled
                self._early.discard(future)
                view.notify()

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
        run = self.run
        client, round = h.client_id, h.vector.round
        r = check_open(run.state, run.round, run.training, client, round)
        if client in r.reported:
            return SubmitResult(True, True, round, "duplicate: already counted for this round")
        check_not_pending(r, client)
        accepted = Accepted.of(h, round, self.store.spool_path(round, client), self.store.layout, nbytes, payload)
        r.pending.add(client)  # until the group commit resolves (see counted)
        durable = self.commits.add(Arrival(tmp, accepted.path, accepted.row, sync=unsynced))

        def counted(f: asyncio.Future) -> None:  # also when this call was cancelled meanwhile: durable means counted
            r.pending.discard(client)
            if not f.cancelled() and f.exception() is None:
                update = accepted.count(r, self.bytes_received)  # inline: folded from memory
                if folded is not None:
                    r.aggregator.add(update, early=folded)  # folded while it was checked: only counted here
                elif (
                    payload is not None
                    and len(payload) <= LOOP_FOLD_BYTES
                    and not (self._folds or self._early)
                    and self.secagg is None
                ):
                    self._fold_here(r, update)  # small, and no fold in the thread: microseconds, no hop
                else:
                    fold = asyncio.wrap_future(self._pool.submit(r.aggregator.add, update))
                    self._folds.add(fold)
                    fold.add_done_callback(self._fold_done)
            run.notify()

        durable.add_done_callback(counted)
        await _through_cancellation(durable)
        log.info(
            "round %d: accepted %s update of %s (%d examples, %d bytes; %d of %d selected reported)",
            round,
            accepted.row.codec,
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
        self.run.notify()

    def _completes_round(self, group) -> bool:
        """A pending group holds every update the open round still waits for: commit it without more delay."""
        r = self.run.training
        return r is not None and r.selected <= set(r.reported) | {a.row.client_id for a in group}

    def close(self) -> None:
        self.commits.close()
        self._pool.shutdown(wait=True)


def check_codec(secagg: MaskedUploads | None, h: UpdateHeader) -> None:
    """Masked uploads exactly when the run uses secure aggregation (never a clear update under --secagg)."""
    if secagg is not None:
        secagg.check_upload(h)
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
