"""A committed round's export (inference model, server eval, model.json) and spool deletion, in the background.

One export at a time, each after its predecessor, overlapped with the next round; the round row
stays COMMITTED until its export is complete, so a crash before then redoes it on restart
(`recovery`). The EXPORTED mark is committed from the export's own thread through a side
connection (`side_writer`), so the event loop never waits on its fsync. The engine owns one `RoundExports` and
hands it what an export reads: the run (its current global vector), the rounds' received bytes, and what
to do with a round's spool once it is exported.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

import numpy as np

from fedort.common.durable import drop_cached, fsync_dir, fsync_file
from fedort.common.faults import fault_point
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.engine.run_view import RunView
from fedort.coordinator.export.inference import Exporter
from fedort.coordinator.state.integrity import read_verified_vector
from fedort.coordinator.state.side_writer import SideWriter
from fedort.coordinator.state.storage import retry_when_full
from fedort.coordinator.state.store import StateStore

log = logging.getLogger(__name__)
CLOSE_WAIT_S = 60.0  # how long closing waits for an export being written (its fsyncs) before leaving it


class RoundExports:
    """The engine's background exports, one after another."""

    def __init__(
        self,
        run: RunView,
        config: CoordinatorConfig,
        store: StateStore,
        exporter: Exporter,
        length: int,
        bytes_received: dict[int, int],
        *,
        exported: Callable[[int], None],
    ) -> None:
        """`run`: where the current global vector is read; `bytes_received`: round -> payload bytes received (the
        intake's; an export takes its round's, absent after a restart); `exported(round)`: called in a worker thread
        once the round's export is complete (the spool's deletion)."""
        self.run, self.config, self.store, self.exporter, self.length = run, config, store, exporter, length
        self._bytes_received, self._exported = bytes_received, exported
        self._task: asyncio.Future | None = None  # the newest background export (each awaits its predecessor)
        self._writer: SideWriter | None = None  # the exports' own SQLite connection
        self._thread: threading.Lock | None = None  # held by the thread writing an export, for its whole write
        self._closed = False

    def prepare(self) -> None:
        """Learn the export's splice from the current global vector in the background (`Exporter.prepare`),
        before any export: the first export waits for it, as each export waits for the one before."""
        g = self.run.global_vector
        if self._task is None and g is not None:
            self._task = asyncio.ensure_future(asyncio.to_thread(self.exporter.prepare, g.vector))

    def start(self, round: int) -> None:
        """Export round `round` in the background, after the previous export (raises a failed previous one)."""
        previous = self._task
        if previous is not None and previous.done():
            previous.result()  # an export failed: end the run visibly now
            previous = None
        vector, record, inline = self._export_inputs(round)  # now: the global vector moves on with the next round

        async def after_previous() -> None:
            if previous is not None:
                await previous
            await retry_when_full(lambda: self._write_export(round, vector, record, inline), f"round {round} export")
            await asyncio.to_thread(self._exported, round)  # 10 x 20 MB unlinks: not on the event loop

        self._task = asyncio.ensure_future(after_previous())

    async def done(self) -> None:
        """Wait for the background exports (raising the error of a failed one)."""
        task, self._task = self._task, None
        if task is not None:
            await task

    async def export(self, round: int) -> None:
        """Write round `round`'s inference model and record (redone on restart if a crash interrupted it)."""
        await self._write_export(round, *self._export_inputs(round))

    def _export_inputs(self, round: int) -> tuple[np.ndarray, dict, bool]:
        row = next(r for r in self.store.rounds() if r.round == round)
        g = self.run.global_vector
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
            "bytes_up": self._bytes_received.pop(round, None),  # payload bytes (None after a restart)
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
                if not self._closed:  # closed meanwhile: the export is redone on restart
                    write_locked()

        def write_locked() -> None:
            fault_point("export.before_write")
            vector_file = self.store.vector_path(round + 1)
            # the vector was durable in its row: its file must be before the export links it (export_external)
            if inline:
                fsync_file(vector_file)  # and before the row drops it
                fsync_dir(vector_file.parent)
            path = self.exporter.export(round, vector, record, self.config.exports_model(round), vector_file)
            if self._writer is None:
                self._writer = self.store.submission_writer()
            fault_point("export.before_mark")
            self.store.mark_exported(round, self.store.layout.relative(path), self._writer)
            fault_point("export.after_mark")
            drop_cached(path)  # durable and done with: free its page cache (the global vectors': at the commit)

        if self._thread is None:
            self._thread = threading.Lock()
        busy = self._thread
        await asyncio.to_thread(write)

    def close(self) -> None:
        """Cancel an unfinished export (redone on restart) and release the exports' connection.

        A cancelled export's thread runs on (a thread cannot be cancelled), so this waits for one that is
        writing before it closes the connection that thread commits through; one that has not begun writing
        exports nothing. A thread still busy after CLOSE_WAIT_S keeps the connection (garbage-collected)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        busy = self._thread
        if busy is not None and not busy.acquire(timeout=CLOSE_WAIT_S):
            log.warning("an export is still being written after %.0f s; its connection stays open", CLOSE_WAIT_S)
            return
        self._closed = True
        if busy is not None:
            busy.release()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
