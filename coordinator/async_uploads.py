"""The asynchronous mode's update intake: admit against the current version, store durably, fold, maybe commit.

    header ──admit──▶ UpdateReceiver (spool temp, sha256) ──lock──▶ re-check ▶ spool file, ledger row,
        submission row (acknowledged from here) ▶ fold into the version's buffer ▶ K-th? commit version v + 1

An update names the version b it was trained on (`UpdateHeader.vector.round`); at current version
v its staleness is v − b. It is refused with FAILED_PRECONDITION (`TooStaleError`) when v − b > S,
checked before any byte is stored and again once the bytes arrived (versions may have moved while
they streamed). One update per client per buffer; a client re-sending an update already counted
(in this or an earlier buffer) gets a duplicate acknowledgement. Everything after the upload runs
under the engine's version lock, so folds and the K-th update's commit are serialised: the K-th
update's acknowledgement comes after version v + 1 is committed, which keeps a simulation on a
virtual clock deterministic. Reuses the synchronous path's pieces (model check, vector header
checks, UpdateReceiver, spool layout, submission rows).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, AsyncIterator

from fedort.coordinator.admission import check_model
from fedort.coordinator.aggregation import codecs
from fedort.coordinator.metrics import metrics_json
from fedort.coordinator.state import SubmissionRow, now_ms
from fedort.coordinator.upload_stream import UpdateReceiver
from fedort.durable import fsync_dir
from fedort.protos.codec import VectorAssembler, check_vector_header
from fedort.protos.errors import ProtocolError, StaleRoundError
from fedort.protos.messages import SubmitResult, UpdateHeader
from fedort.protos.round_state import RoundState

if TYPE_CHECKING:
    from fedort.coordinator.async_engine import AsyncEngine

log = logging.getLogger(__name__)

MAX_CONCURRENT_UPLOADS = 4     # updates assembled in memory at once: memory stays O(P)


class AsyncUploads:
    """The async engine's `submit`: one call per upload stream."""

    def __init__(self, engine: "AsyncEngine") -> None:
        self.engine = engine
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_UPLOADS)
        self._temp_counter = 0
        self.busy = False        # (read by the sync engine's helpers; folds here finish before the reply)

    def _check(self, h: UpdateHeader) -> tuple[int, int] | None:
        """(version, staleness) the update would join now, or None if it was already counted (a duplicate)."""
        e = self.engine
        base, client = h.vector.round, h.client_id
        if e.state is not RoundState.TRAINING or e.training is None:
            raise StaleRoundError(f"no global version is open for updates now (state {e.state.name}, version {e.round})")
        if not isinstance(base, int) or not 1 <= base <= e.round:
            raise ProtocolError(f"update trained on version {base}, expected a version in 1..{e.round} "
                                "(the current global version)")
        if e.ledger.counted_in(client, base) is not None:
            return None
        staleness = e.buffer.staleness_of(base)        # TooStaleError (FAILED_PRECONDITION) past max_staleness
        if client in e.training.reported or client in e.training.pending:
            raise StaleRoundError(f"client {client} already contributed to the buffer of version {e.round}; "
                                  f"poll for a task on version {e.round + 1}")
        return e.round, staleness

    def admit(self, h: UpdateHeader) -> VectorAssembler | None:
        """The assembler to receive into, or None for a duplicate; errors say what was expected."""
        e = self.engine
        check_model(h.vector.model_id, e.model_id)
        if self._check(h) is None:
            return None
        check_vector_header(h.vector, codecs=codecs(), expected_length=e.length)
        if not 1 <= h.num_examples <= e.config.max_examples:
            raise ProtocolError(f"num_examples must be in 1..{e.config.max_examples}, got {h.num_examples}")
        return VectorAssembler(h.vector, expected_length=e.length, max_length=e.config.max_vector_length,
                               max_chunk_bytes=e.config.max_chunk_bytes, codecs=codecs())

    async def submit(self, h: UpdateHeader, chunks: AsyncIterator[bytes]) -> SubmitResult:
        """Admit, receive, store, fold (and commit a version on the K-th update); acknowledged when this returns."""
        e = self.engine
        e.touch(h.client_id)
        assembler = self.admit(h)
        if assembler is None:
            async for _ in chunks:
                pass
            return SubmitResult(True, True, h.vector.round, "duplicate: this update was already counted")
        async with self._slots:
            self._temp_counter += 1
            # the version may commit (and its spool folder go) while this streams: temp files live in
            # spool folder 0, which no version owns, and move into the accepting version's folder
            receiver = UpdateReceiver(assembler, e.store.layout.spool_temp(0, h.client_id, self._temp_counter))
            try:
                async for chunk in chunks:
                    receiver.add(chunk)
                vector = await receiver.finish()
                async with e.version_lock:
                    return await self._accept(h, vector, receiver.tmp_path)
            finally:
                receiver.close()

    async def _accept(self, h: UpdateHeader, vector, spooled: Path) -> SubmitResult:
        e = self.engine
        checked = self._check(h)
        if checked is None:
            return SubmitResult(True, True, h.vector.round, "duplicate: this update was already counted")
        version, staleness = checked
        client, base, r = h.client_id, h.vector.round, e.training
        r.pending.add(client)
        try:
            path = e.store.spool_path(version, client)
            await asyncio.to_thread(_place, spooled, path)
            metrics = metrics_json(h.metrics)
            e.ledger.record(version, client, base)
            e.store.add_submission(SubmissionRow(version, client, h.num_examples, metrics, h.vector.sha256.hex(),
                                                 e.store.layout.relative(path), now_ms(), h.vector.codec))
            # durable from here on: it counts, and a restart replays it from the spool
            r.record(client, h.num_examples, metrics)
            await asyncio.to_thread(r.aggregator.fold, h.vector.codec, vector, h.num_examples, base)
        finally:
            r.pending.discard(client)
            e.notify()
        weight = e.buffer.weight(staleness)
        log.info("version %d: accepted update of %s trained on version %d (staleness %d, weight %.3g); %d of %d "
                 "buffered", version, client, base, staleness, weight, e.buffer.count, e.buffer.buffer_size)
        message = (f"accepted into the buffer of version {version} (staleness {staleness}, weight {weight:.3g}, "
                   f"{e.buffer.count} of {e.buffer.buffer_size})")
        if e.buffer.ready:
            await e.commit_version()
        return SubmitResult(True, False, base, message)


def _place(tmp: Path, path: Path) -> None:
    """Rename a fsynced temp file into the version's spool folder and make the rename durable."""
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        fsync_dir(path.parent.parent)
    os.replace(tmp, path)
    fsync_dir(path.parent)
