"""A committed round's export (inference model, server eval, model.json) and spool deletion, in the background.

One export at a time, each after its predecessor, overlapped with the next round; the round row
stays COMMITTED until its export is complete, so a crash before then redoes it on restart
(`recovery`). The EXPORTED mark is committed from the export's own thread through a side
connection (`side_writer`), so the event loop never waits on its fsync.
(A mixin of `round_engine.RoundEngine`: every attribute used here is the engine's.)
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, cast

import numpy as np

from fedort.common.durable import drop_cached, fsync_dir, fsync_file
from fedort.common.faults import fault_point
from fedort.coordinator.engine.recovery import drop_spool
from fedort.coordinator.state.integrity import read_verified_vector
from fedort.coordinator.state.storage import retry_when_full

log = logging.getLogger(__name__)
CLOSE_WAIT_S = 60.0  # how long closing waits for an export being written (its fsyncs) before leaving it

if TYPE_CHECKING:
    from fedort.coordinator.config import CoordinatorConfig
    from fedort.coordinator.engine.round_engine import RoundEngine
    from fedort.coordinator.engine.training_round import GlobalVector
    from fedort.coordinator.export.inference import Exporter
    from fedort.coordinator.state.store import StateStore
    from fedort.coordinator.uploads.intake import Uploads


class RoundExports:
    """The engine's background exports."""

    # the engine's attributes this mixin reads (set by RoundEngine.__init__)
    config: CoordinatorConfig
    store: StateStore
    exporter: Exporter
    length: int
    global_vector: GlobalVector | None
    uploads: Uploads

    _export_task: asyncio.Future | None = None  # the newest background export (each awaits its predecessor)
    _export_writer = None  # the exports' own SQLite connection (side_writer.SideWriter)
    _export_thread: threading.Lock | None = None  # held by the thread writing an export, for its whole write
    _exports_closed = False

    def prepare_exports(self) -> None:
        """Learn the export's splice from the current global vector in the background (`Exporter.prepare`),
        before any export: the first export waits for it, as each export waits for the one before."""
        g = self.global_vector
        if self._export_task is None and g is not None:
            self._export_task = asyncio.ensure_future(asyncio.to_thread(self.exporter.prepare, g.vector))

    def start_export(self, round: int) -> None:
        """Export round `round` in the background, after the previous export (raises a failed previous one)."""
        previous = self._export_task
        if previous is not None and previous.done():
            previous.result()  # an export failed: end the run visibly now
            previous = None
        vector, record, inline = self._export_inputs(round)  # now: the global vector moves on with the next round

        async def after_previous() -> None:
            if previous is not None:
                await previous
            await retry_when_full(lambda: self._write_export(round, vector, record, inline), f"round {round} export")
            engine = cast("RoundEngine", self)  # the mixin's object is the engine
            await asyncio.to_thread(drop_spool, engine, round)  # 10 x 20 MB unlinks: not on the event loop

        self._export_task = asyncio.ensure_future(after_previous())

    async def exports_done(self) -> None:
        """Wait for the background exports (raising the error of a failed one)."""
        task, self._export_task = self._export_task, None
        if task is not None:
            await task

    async def export(self, round: int) -> None:
        """Write round `round`'s inference model and record (redone on restart if a crash interrupted it)."""
        await self._write_export(round, *self._export_inputs(round))

    def _export_inputs(self, round: int) -> tuple[np.ndarray, dict, bool]:
        row = next(r for r in self.store.rounds() if r.round == round)
        g = self.global_vector
        vector = (
            g.vector
            if g and g.round == round + 1
            else read_verified_vector(self.store.vector_path(round + 1), self.length, row.vector_sha256)
        )
        submissions = self.store.submissions(round)
        record = {
            "clients": row.clients,
            "client_ids": [s.client_id for s in submissions],
            "codecs": sorted({s.codec for s in submissions}),
            "bytes_up": self.uploads.bytes_received.pop(round, None),  # payload bytes (None after a restart)
            "examples": row.examples,
            "metrics": row.metrics,
            "attempts": row.attempt,
            "vector_sha256": row.vector_sha256,
            "vector": self.store.vector_path(round + 1).name,
            "training_config": self.config.training_json(),
        }
        return vector, record, row.vector is not None

    async def _write_export(self, round: int, vector: np.ndarray, record: dict, inline: bool = True) -> None:
        def write() -> None:  # its row too, through a side connection: the event loop never waits on this fsync
            with busy:
                if not self._exports_closed:  # closed meanwhile: the export is redone on restart
                    write_locked()

        def write_locked() -> None:
            fault_point("export.before_write")
            vector_file = self.store.vector_path(round + 1)
            # the vector was durable in its row: its file must be before the export links it (export_external)
            if inline:
                fsync_file(vector_file)  # and before the row drops it
                fsync_dir(vector_file.parent)
            path = self.exporter.export(round, vector, record, self.config.exports_model(round), vector_file)
            if self._export_writer is None:
                self._export_writer = self.store.submission_writer()
            fault_point("export.before_mark")
            self.store.mark_exported(round, self.store.layout.relative(path), self._export_writer)
            fault_point("export.after_mark")
            drop_cached(path)  # durable and done with: free its page cache (the global vectors': at the commit)

        if self._export_thread is None:
            self._export_thread = threading.Lock()
        busy = self._export_thread
        await asyncio.to_thread(write)

    def close_exports(self) -> None:
        """Cancel an unfinished export (redone on restart) and release the exports' connection.

        A cancelled export's thread runs on (a thread cannot be cancelled), so this waits for one that is
        writing before it closes the connection that thread commits through; one that has not begun writing
        exports nothing. A thread still busy after CLOSE_WAIT_S keeps the connection (garbage-collected)."""
        if self._export_task is not None and not self._export_task.done():
            self._export_task.cancel()
        busy = self._export_thread
        if busy is not None and not busy.acquire(timeout=CLOSE_WAIT_S):
            log.warning("an export is still being written after %.0f s; its connection stays open", CLOSE_WAIT_S)
            return
        self._exports_closed = True
        if busy is not None:
            busy.release()
        if self._export_writer is not None:
            self._export_writer.close()
            self._export_writer = None
