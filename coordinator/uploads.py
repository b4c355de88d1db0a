"""Accepting an update: admission, the upload stream into the spool, durability, then the aggregator.

    header, chunks ──admit──▶ UpdateReceiver (spool temp file, sha256) ──▶ rename + fsync, SQLite row
                                                                      ──▶ acknowledged ──▶ aggregator.add

An update counts (and is acknowledged) once its spool file and its row are durable; the fold
into the round's aggregator then runs in one worker thread (streaming combiners are not
thread-safe) and the round cannot close before every fold finished. At most
MAX_CONCURRENT_UPLOADS updates are assembled in memory at once and FOLD_QUEUE acknowledged ones
wait to be folded, so memory stays O(P) under many concurrent uploads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, AsyncIterator

import numpy as np

from fedort.coordinator.admission import admit_update, check_not_pending, check_open
from fedort.coordinator.aggregation import Update
from fedort.coordinator.metrics import metrics_json
from fedort.coordinator.state import SubmissionRow, now_ms
from fedort.durable import fsync_dir
from fedort.coordinator.upload_stream import UpdateReceiver
from fedort.protos.errors import ProtocolError
from fedort.protos.messages import SubmitResult, UpdateHeader
from fedort.protos.secagg.task import SECAGG_CODEC

if TYPE_CHECKING:
    from fedort.coordinator.round_engine import RoundEngine

log = logging.getLogger(__name__)

MAX_CONCURRENT_UPLOADS = 4     # updates assembled in memory at once ...
FOLD_QUEUE = 2                 # ... plus acknowledged updates waiting to be folded: memory stays O(P)


class Uploads:
    """The engine's update intake: one `submit` per upload stream."""

    def __init__(self, engine: "RoundEngine") -> None:
        self.engine = engine
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_UPLOADS)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedort-fold")
        self._fold_slots = asyncio.Semaphore(FOLD_QUEUE)
        self._folds: set[asyncio.Future] = set()
        self.fold_error: BaseException | None = None
        self._temp_counter = 0

    @property
    def busy(self) -> bool:
        """Some update is being stored or folded: the open round must not close yet."""
        r = self.engine.training
        return bool(self._folds) or (r is not None and bool(r.pending))

    async def submit(self, h: UpdateHeader, chunks: AsyncIterator[bytes]) -> SubmitResult:
        """Admit, receive, store and count one update; acknowledged only when this returns."""
        e = self.engine
        e.touch(h.client_id)
        check_codec(e, h)
        assembler = admit_update(h, model_id=e.model_id, length=e.length, config=e.config, state=e.state,
                                 current=e.round, open_round=e.training)
        if assembler is None:
            async for _ in chunks:
                pass
            return SubmitResult(True, True, h.vector.round, "duplicate: this update was already counted")
        async with self._slots:
            t0 = time.perf_counter()
            self._temp_counter += 1
            receiver = UpdateReceiver(assembler, e.store.layout.spool_temp(h.vector.round, h.client_id,
                                                                           self._temp_counter))
            try:
                async for chunk in chunks:
                    receiver.add(chunk)
                vector = await receiver.finish()
                t1 = time.perf_counter()
                result = await self._accept(h, vector, receiver.tmp_path)
            finally:
                receiver.close()
            log.debug("update of %s: %.1f MB received in %.0f ms, stored and folded in %.0f ms", h.client_id,
                      vector.nbytes / 1e6, 1000 * (t1 - t0), 1000 * (time.perf_counter() - t1))
        return result

    async def _accept(self, h: UpdateHeader, vector: np.ndarray, spooled: Path) -> SubmitResult:
        """Make a received update durable and count it (the round may have closed while the chunks streamed)."""
        e = self.engine
        client, round = h.client_id, h.vector.round
        check_open(e.state, e.round, e.training, client, round)
        r = e.training
        if client in r.reported:
            return SubmitResult(True, True, round, "duplicate: already counted for this round")
        check_not_pending(r, client)
        r.pending.add(client)
        try:
            t0 = time.perf_counter()
            path = e.store.spool_path(round, client)
            await asyncio.to_thread(_place, spooled, path)
            t1 = time.perf_counter()
            metrics = metrics_json(h.metrics)
            e.store.add_submission(SubmissionRow(round, client, h.num_examples, metrics, h.vector.sha256.hex(),
                                                 e.store.layout.relative(path), now_ms(), h.vector.codec))
            log.debug("round %d: update of %s spooled in %.0f ms, row committed in %.0f ms", round, client,
                      1000 * (t1 - t0), 1000 * (time.perf_counter() - t1))
            # Durable from here on, so it counts: the reply need not wait for the fold.
            await self._fold_slots.acquire()
            r.record(client, h.num_examples, metrics)
            update = Update(client, h.num_examples, h.vector.codec, path, payload=vector)
            fold = asyncio.wrap_future(self._pool.submit(r.aggregator.add, update))
            self._folds.add(fold)
            fold.add_done_callback(self._fold_done)
        finally:
            r.pending.discard(client)
            e.notify()
        log.info("round %d: accepted update of %s (%d examples; %d of %d selected reported)", round, client,
                 h.num_examples, len(r.reported), len(r.selected))
        return SubmitResult(True, False, round, "accepted")

    def _fold_done(self, fold: asyncio.Future) -> None:
        self._folds.discard(fold)
        self._fold_slots.release()
        if not fold.cancelled() and fold.exception() is not None:
            self.fold_error = fold.exception()
        self.engine.notify()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def check_codec(e: "RoundEngine", h: UpdateHeader) -> None:
    """Masked uploads exactly when the run uses secure aggregation (never a clear update under --secagg)."""
    if e.secagg is not None:
        e.secagg.check_upload(h)
    elif h.vector.codec == SECAGG_CODEC:
        raise ProtocolError(f"codec {SECAGG_CODEC!r} is for secure aggregation, which this run does not use")


def _place(tmp: Path, path: Path) -> None:
    """Rename a fsynced temp file into place and make the rename durable."""
    os.replace(tmp, path)
    fsync_dir(path.parent)
