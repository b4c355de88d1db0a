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
or an earlier buffer) gets a duplicate acknowledgement. Receiving is the synchronous path's
(`uploads.receiving`: upload slots, per-client share, whole-upload deadline, monitor counts), and so
are the row and the counting (`uploads.accepted`); slots are never cut short by a version commit
(an upload in flight joins the next version's buffer). `AsyncUploads` is an `uploads.intake.UploadIntake`.
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
from typing import Protocol

import numpy as np

from fedort.common.durable import fsync_dir, fsync_file
from fedort.common.errors import ProtocolError, StaleRoundError
from fedort.common.invariants import present
from fedort.common.round_state import RoundState
from fedort.coordinator.aggregation import decoder_for
from fedort.coordinator.colocated.local_vectors import TakenFile, with_taken_digest
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.engine.registry import ClientRegistry
from fedort.coordinator.engine.run_view import RunView
from fedort.coordinator.fedbuff.buffer import UpdateBuffer
from fedort.coordinator.fedbuff.ledger import AsyncLedger
from fedort.coordinator.rpc.monitoring import Monitoring
from fedort.coordinator.state.store import StateStore
from fedort.coordinator.uploads.accepted import Accepted, drained_duplicate
from fedort.coordinator.uploads.admission import AdmittedUpdate, admit_async_update, check_model
from fedort.coordinator.uploads.receiving import received
from fedort.coordinator.uploads.slots import UploadSlots
from fedort.coordinator.uploads.spool_free import FreeSpoolFiles
from fedort.coordinator.uploads.stream import spool_error
from fedort.protos.messages import SubmitResult, UpdateHeader

log = logging.getLogger(__name__)


class Versions(RunView, Protocol):
    """The asynchronous run the intake feeds: its global versions, and the commit the K-th update starts."""

    def version_sha256(self, version: int) -> bytes: ...

    def version_vector(self, version: int) -> np.ndarray: ...

    async def commit_version(self) -> None: ...


class BufferFold:
    """Stands in for the round aggregator: decodes an update and folds it into the version's buffer."""

    def __init__(self, run: Versions, buffer: UpdateBuffer, ledger: AsyncLedger, version: int, length: int) -> None:
        self.run, self.buffer, self.ledger, self.version, self.length = run, buffer, ledger, version, length

    def add(self, update) -> None:
        """Replay: fold a spooled update with the base version its ledger row recorded."""
        base = self.ledger.base_of(self.version, update.client_id)
        self.fold(update.codec, update.encoded(), update.num_examples, base)

    def fold(self, codec: str, payload: np.ndarray, num_examples: int, base: int) -> None:
        fold_update(self.buffer, self.run, self.length, codec, payload, num_examples, base)


def fold_update(
    buffer: UpdateBuffer, run: Versions, length: int, codec: str, payload: np.ndarray, num_examples: int, base: int
) -> None:
    """Decode with the codec's decoder and fold into `buffer`: a delta codec's values are Δ = x − x_b already,
    a raw update is x (folded as x − x_b, x_b read from `run`)."""
    decoder = decoder_for(codec)
    values = decoder.decode(payload, length)
    buffer.add(values, num_examples, base, None if decoder.delta else run.version_vector(base))


class AsyncUploads:
    """The async engine's `submit`: one call per upload stream (an `uploads.intake.UploadIntake`)."""

    def __init__(
        self,
        run: Versions,
        *,
        config: CoordinatorConfig,
        store: StateStore,
        registry: ClientRegistry,
        monitor: Monitoring,
        model_id: str,
        length: int,
        buffer: UpdateBuffer,
        ledger: AsyncLedger,
        version_lock: asyncio.Lock,
        spool_free: FreeSpoolFiles | None = None,
    ) -> None:
        self.run, self.config, self.store, self.registry, self.monitor = run, config, store, registry, monitor
        self.model_id, self.length, self.buffer, self.ledger = model_id, length, buffer, ledger
        self.version_lock, self.spool_free = version_lock, spool_free
        cfg = config
        self.slots = UploadSlots(cfg.uploads.max_concurrent_uploads, cfg.uploads.uploads_per_client)
        self._temp_counter = 0
        self.busy = False  # (read by the round's close; folds here finish before the reply)
        self.fold_error: BaseException | None = None  # (folds here fail their own upload)
        self.bytes_received: dict[int, int] = {}  # version -> payload bytes of accepted updates

    def round_closed(self, round: int) -> None:
        """(The synchronous engine's hook) versions do not cut uploads short: they join the next buffer."""

    def close(self) -> None:
        """Nothing to release: the engine closes the ledger."""

    def _check(self, h: UpdateHeader) -> tuple[int, int] | None:
        """(version, staleness) the update would join now, or None if it was already counted (a duplicate)."""
        e = self.run
        base, client = h.vector.round, h.client_id
        if e.state is not RoundState.TRAINING or e.training is None:
            raise StaleRoundError(
                f"no global version is open for updates now (state {e.state.name}, version {e.round})"
            )
        if not isinstance(base, int) or not 1 <= base <= e.round:
            raise ProtocolError(
                f"update trained on version {base}, expected a version in 1..{e.round} (the current global version)"
            )
        if self.ledger.counted_in(client, base) is not None:
            return None
        staleness = self.buffer.staleness_of(base)  # TooStaleError (FAILED_PRECONDITION) past max_staleness
        if client in e.training.reported or client in e.training.pending:
            raise StaleRoundError(
                f"client {client} already contributed to the buffer of version {e.round}; "
                f"poll for a task on version {e.round + 1}"
            )
        return e.round, staleness

    def admit(self, h: UpdateHeader) -> AdmittedUpdate | None:
        """What to receive the update with, or None for a duplicate; errors say what was expected."""
        check_model(h.vector.model_id, self.model_id)
        if self._check(h) is None:
            return None
        base = h.vector.round
        return admit_async_update(
            h,
            length=self.length,
            config=self.config,
            base_sha256=self.run.version_sha256(base),
            base_vector=lambda: self.run.version_vector(base),
            announced=self.registry.capabilities(h.client_id).get("examples"),
        )

    async def submit(self, h: UpdateHeader, chunks: AsyncIterator[bytes]) -> SubmitResult:
        """Admit, receive, store, fold (and commit a version on the K-th update); acknowledged when this returns."""
        self.registry.touch(h.client_id)
        admitted = self.admit(h)
        if admitted is None:
            return await drained_duplicate(chunks, h.vector.round, self.monitor)
        self._temp_counter += 1
        # the version may commit (and its spool folder go) while this streams: temp files live in
        # spool folder 0, which no version owns, and move into the accepting version's folder
        tmp = self.store.layout.spool_temp(0, h.client_id, self._temp_counter)
        async with received(
            admitted,
            tmp,
            chunks,
            slots=self.slots,
            slot_round=0,
            config=self.config,
            monitor=self.monitor,
            free=self.spool_free,
        ) as receiver:
            h = with_taken_digest(h, receiver)
            async with self.version_lock:
                result = await self._accept(h, tmp, admitted.payload_bytes, isinstance(receiver, TakenFile))
        self.monitor.update_accepted(duplicate=result.duplicate)
        return result

    async def _accept(self, h: UpdateHeader, spooled: Path, nbytes: int, unsynced: bool = False) -> SubmitResult:
        checked = self._check(h)
        if checked is None:
            return SubmitResult(True, True, h.vector.round, "duplicate: this update was already counted")
        version, staleness = checked
        client, base, r = h.client_id, h.vector.round, present(self.run.training, "the open version")
        r.pending.add(client)
        try:
            path = self.store.spool_path(version, client)
            try:
                await asyncio.to_thread(_place, spooled, path, unsynced)
            except OSError as err:
                raise spool_error(err, "place the spooled update") from err
            accepted = Accepted.of(h, version, path, self.store.layout, nbytes)
            self.ledger.record(version, client, base)
            self.store.add_submission(accepted.row)
            # durable from here on: it counts, and a restart replays it from the spool
            update = accepted.count(r, self.bytes_received)
            args = (self.buffer, self.run, self.length, update.codec, update.encoded(), h.num_examples, base)
            await asyncio.to_thread(fold_update, *args)
        finally:
            r.pending.discard(client)
            self.run.notify()
        buffer = self.buffer
        weight = buffer.weight(staleness)
        log.info(
            "version %d: accepted update of %s trained on version %d (staleness %d, weight %.3g); %d of %d buffered",
            version,
            client,
            base,
            staleness,
            weight,
            buffer.count,
            buffer.buffer_size,
        )
        message = (
            f"accepted into the buffer of version {version} (staleness {staleness}, weight {weight:.3g}, "
            f"{buffer.count} of {buffer.buffer_size})"
        )
        if buffer.ready:
            await self.run.commit_version()
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
