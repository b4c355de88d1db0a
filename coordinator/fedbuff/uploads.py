"""The asynchronous mode's update intake: admit against the update's base version, store durably, fold, maybe commit.

    header ──admit──▶ slot ──▶ UpdateReceiver (spool temp, sha256, streaming decode check) ──lock──▶ re-check
        ▶ spool file, ledger row, submission row (acknowledged from here) ▶ fold from the spool into the
        version's buffer ▶ K-th? commit version v + 1

An update names the version b it was trained on (`UpdateHeader.vector.round`); at current version
v its staleness is v − b. It is refused with FAILED_PRECONDITION (`TooStaleError`) when v − b > S,
checked before any byte is stored and again once the bytes arrived (versions may have moved while
they streamed). Its `trained_from_sha256` must be version b's global vector (the sha256 recorded
when b was committed; FAILED_PRECONDITION otherwise, INVALID_ARGUMENT if missing), checked by the
one admission module (`admit_async_update`). Every codec the run allows is accepted: a delta
codec's payload is relative to version b's global (its base_sha256 must name it), which is
exactly the Δ the buffer folds, so the fold needs no base vector for it; a raw update is folded as
x − x_b. One update per client per buffer; a client re-sending an update already counted (in this
or an earlier buffer) gets a duplicate acknowledgement. Receiving shares the synchronous path's
`uploads.received` (upload slots, per-client share, whole-upload deadline, monitor counts); slots
are never cut short by a version commit (an upload in flight joins the next version's buffer).
Everything after the upload runs under the engine's version lock, so folds and the K-th update's
commit are serialised: the K-th update's acknowledgement comes after version v + 1 is committed,
which keeps a simulation on a virtual clock deterministic.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

from fedort.common import digests
from fedort.common.durable import fsync_dir, fsync_file
from fedort.common.errors import ProtocolError, StaleRoundError
from fedort.common.invariants import present
from fedort.common.round_state import RoundState
from fedort.coordinator.aggregation import Update
from fedort.coordinator.colocated.local_vectors import TakenFile, with_taken_digest
from fedort.coordinator.engine.round_metrics import metrics_json
from fedort.coordinator.state.schema import SubmissionRow
from fedort.coordinator.state.store import now_ms
from fedort.coordinator.uploads.admission import AdmittedUpdate, admit_async_update, check_model
from fedort.coordinator.uploads.intake import received
from fedort.coordinator.uploads.slots import UploadSlots
from fedort.coordinator.uploads.stream import spool_error
from fedort.protos.messages import SubmitResult, UpdateHeader

if TYPE_CHECKING:
    from fedort.coordinator.fedbuff.engine import AsyncEngine, BufferFold

log = logging.getLogger(__name__)


class AsyncUploads:
    """The async engine's `submit`: one call per upload stream."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        cfg = engine.config
        self.slots = UploadSlots(cfg.uploads.max_concurrent_uploads, cfg.uploads.uploads_per_client)
        self._temp_counter = 0
        self.busy = False  # (read by the sync engine's helpers; folds here finish before the reply)
        self.bytes_received: dict[int, int] = {}  # version -> payload bytes of accepted updates

    def round_closed(self, round: int) -> None:
        """(The synchronous engine's hook) versions do not cut uploads short: they join the next buffer."""

    def _check(self, h: UpdateHeader) -> tuple[int, int] | None:
        """(version, staleness) the update would join now, or None if it was already counted (a duplicate)."""
        e = self.engine
        base, client = h.vector.round, h.client_id
        if e.state is not RoundState.TRAINING or e.training is None:
            raise StaleRoundError(
                f"no global version is open for updates now (state {e.state.name}, version {e.round})"
            )
        if not isinstance(base, int) or not 1 <= base <= e.round:
            raise ProtocolError(
                f"update trained on version {base}, expected a version in 1..{e.round} (the current global version)"
            )
        if e.ledger.counted_in(client, base) is not None:
            return None
        staleness = e.buffer.staleness_of(base)  # TooStaleError (FAILED_PRECONDITION) past max_staleness
        if client in e.training.reported or client in e.training.pending:
            raise StaleRoundError(
                f"client {client} already contributed to the buffer of version {e.round}; "
                f"poll for a task on version {e.round + 1}"
            )
        return e.round, staleness

    def admit(self, h: UpdateHeader) -> AdmittedUpdate | None:
        """What to receive the update with, or None for a duplicate; errors say what was expected."""
        e = self.engine
        check_model(h.vector.model_id, e.model_id)
        if self._check(h) is None:
            return None
        base = h.vector.round
        return admit_async_update(
            h,
            length=e.length,
            config=e.config,
            base_sha256=e.version_sha256(base),
            base_vector=lambda: e.version_vector(base),
            announced=e.registry.capabilities(h.client_id).get("examples"),
        )

    async def submit(self, h: UpdateHeader, chunks: AsyncIterator[bytes]) -> SubmitResult:
        """Admit, receive, store, fold (and commit a version on the K-th update); acknowledged when this returns."""
        e = self.engine
        e.touch(h.client_id)
        admitted = self.admit(h)
        if admitted is None:
            async for _ in chunks:
                pass
            e.monitor.update_accepted(duplicate=True)
            return SubmitResult(True, True, h.vector.round, "duplicate: this update was already counted")
        self._temp_counter += 1
        # the version may commit (and its spool folder go) while this streams: temp files live in
        # spool folder 0, which no version owns, and move into the accepting version's folder
        tmp = e.store.layout.spool_temp(0, h.client_id, self._temp_counter)
        async with received(
            admitted, tmp, chunks, slots=self.slots, slot_round=0, config=e.config, monitor=e.monitor, free=e.spool_free
        ) as receiver:
            h = with_taken_digest(h, receiver)
            async with e.version_lock:
                result = await self._accept(h, tmp, admitted.payload_bytes, isinstance(receiver, TakenFile))
        e.monitor.update_accepted(duplicate=result.duplicate)
        return result

    async def _accept(self, h: UpdateHeader, spooled: Path, nbytes: int, unsynced: bool = False) -> SubmitResult:
        e = self.engine
        checked = self._check(h)
        if checked is None:
            return SubmitResult(True, True, h.vector.round, "duplicate: this update was already counted")
        version, staleness = checked
        client, base, r = h.client_id, h.vector.round, present(e.training, "the open version")
        codec = h.vector.codec or "raw"
        r.pending.add(client)
        try:
            path = e.store.spool_path(version, client)
            try:
                await asyncio.to_thread(_place, spooled, path, unsynced)
            except OSError as err:
                raise spool_error(err, "place the spooled update") from err
            metrics = metrics_json(h.metrics)
            e.ledger.record(version, client, base)
            e.store.add_submission(
                SubmissionRow(
                    version,
                    client,
                    h.num_examples,
                    metrics,
                    digests.stored(h.vector.digest, h.vector.sha256),
                    e.store.layout.relative(path),
                    now_ms(),
                    codec,
                )
            )
            # durable from here on: it counts, and a restart replays it from the spool
            r.record(client, h.num_examples, metrics)
            self.bytes_received[version] = self.bytes_received.get(version, 0) + nbytes
            update = Update(client, h.num_examples, codec, path)
            fold = cast("BufferFold", r.aggregator)  # the async engine's rounds fold into its buffer
            await asyncio.to_thread(fold.fold, codec, update.encoded(), h.num_examples, base)
        finally:
            r.pending.discard(client)
            e.notify()
        weight = e.buffer.weight(staleness)
        log.info(
            "version %d: accepted update of %s trained on version %d (staleness %d, weight %.3g); %d of %d buffered",
            version,
            client,
            base,
            staleness,
            weight,
            e.buffer.count,
            e.buffer.buffer_size,
        )
        message = (
            f"accepted into the buffer of version {version} (staleness {staleness}, weight {weight:.3g}, "
            f"{e.buffer.count} of {e.buffer.buffer_size})"
        )
        if e.buffer.ready:
            await e.commit_version()
        return SubmitResult(True, False, base, message)


def _place(tmp: Path, path: Path, unsynced: bool = False) -> None:
    """Rename a fsynced temp file (`unsynced`: fsync its data first: a co-located device's, `TakenFile`) into
    the version's spool folder and make the rename durable."""
    if unsynced:
        fsync_file(tmp, data_only=True)
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        fsync_dir(path.parent.parent)
    os.replace(tmp, path)
    fsync_dir(path.parent)
