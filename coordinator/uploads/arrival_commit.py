"""Group commit of arrivals: updates that become durable together share one folder fsync and one transaction.

An update is acknowledged only once its spool file is in place (rename + fsync of the folder)
and its submission row is committed (SQLite WAL, synchronous=FULL). Done one update at a time
on the event loop, that is two fsyncs per update with the loop blocked in the second. Here
arrivals queue instead, and one commit thread takes every queued arrival at once:

    [fdatasync of co-located devices' files taken without one (`Arrival.sync`)] -> renames of the
    (now fsynced) temp files -> one fsync per folder -> one transaction with every row

(A small update's bytes travel inside its row, `inline_update_bytes`: it has no temp file; its
spool file is written here from the row, neither it nor its folder fsynced, and only if a spool
combiner will read it (`copy_inline`; a streaming one folds the bytes from memory), so a group of
small updates costs one WAL fsync; recovery rewrites their files.)

then resolves every member together: all durable, or all failed with the same error (none is
acknowledged; the transaction rolled back, and a file already renamed is an orphan that no row
names, which recovery deletes and a retry replaces). The first arrival starts a commit at once,
so an update alone pays no wait; arrivals during a commit form the next group (as in a
database's group commit). `commit_delay_ms` (0 by default) holds a group open up to that long
for more arrivals, ending early once the group holds every update the open round still waits for.

A member whose upload call is cancelled while its group commits is still resolved (and counted
by the caller's done-callback), so a durable row is never left uncounted in memory.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fedort.common.durable import fsync_dir, fsync_file
from fedort.coordinator.state.schema import SubmissionRow
from fedort.coordinator.state.side_writer import SideWriter
from fedort.coordinator.state.store import StateStore
from fedort.coordinator.uploads.stream import spool_error

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Arrival:
    """A received, checked and fsynced update: its temp spool file, its place, and its row. `sync`: the
    file's data is not durable yet (a co-located device's file, taken without its fdatasync): the commit
    fdatasyncs it before placing it, in the commit thread rather than the fold thread."""

    spooled: Path
    path: Path
    row: SubmissionRow
    sync: bool = False


class ArrivalCommit:
    """Makes arrivals durable in groups; `add(arrival)` returns a future resolved with its whole group."""

    def __init__(
        self,
        store: StateStore,
        delay_s: float = 0.0,
        complete: Callable[[Sequence[Arrival]], bool] = lambda group: False,
        on_commit: Callable[[int], None] = lambda size: None,
        copy_inline: bool = True,
    ) -> None:
        self._store = store
        self._writer: SideWriter | None = None
        self._delay_s = delay_s
        self._complete = complete
        self._on_commit = on_commit
        self._copy_inline = copy_inline  # False: nothing reads an inline update's spool file (replay rewrites it)
        self._queue: list[tuple[Arrival, asyncio.Future]] = []
        self._task: asyncio.Future | None = None
        self._more: asyncio.Event | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedort-commit")

    def add(self, arrival: Arrival) -> asyncio.Future:
        """Queue `arrival` for the next group commit; the future fails with the group's error."""
        future = asyncio.get_running_loop().create_future()
        self._queue.append((arrival, future))
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())  # starts on the next loop pass: same-tick arrivals join
        elif self._more is not None:
            self._more.set()
        return future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                await self._gather(loop)
                group, self._queue = self._queue, []
                try:
                    await loop.run_in_executor(self._pool, self._write, [a for a, _ in group])
                except BaseException as e:
                    for _, f in group:
                        if not f.done():
                            f.cancel() if isinstance(e, asyncio.CancelledError) else f.set_exception(e)
                    if isinstance(e, asyncio.CancelledError):
                        raise
                    log.warning("group commit of %d arrival(s) failed, none acknowledged: %s", len(group), e)
                else:
                    self._on_commit(len(group))
                    for _, f in group:
                        if not f.done():
                            f.set_result(None)
        finally:
            self._task = None

    async def _gather(self, loop: asyncio.AbstractEventLoop) -> None:
        """With a commit delay: wait for more arrivals until the delay ends or the group is complete."""
        end = loop.time() + self._delay_s
        while self._delay_s > 0 and not self._complete([a for a, _ in self._queue]) and loop.time() < end:
            self._more = asyncio.Event()
            waiter = asyncio.ensure_future(self._more.wait())
            try:
                await asyncio.wait({waiter}, timeout=end - loop.time())
            finally:
                waiter.cancel()
                self._more = None

    def _write(self, arrivals: list[Arrival]) -> None:
        """In the commit thread: place every file, fsync each folder once, commit every row in one transaction."""
        copies = [a.path for a in arrivals if a.row.payload is not None] if self._copy_inline else []
        try:
            try:
                for a in arrivals:  # all data durable before any name: a failed sync places nothing
                    if a.sync:
                        fsync_file(a.spooled, data_only=True)
                for a in arrivals:
                    if a.row.payload is None:
                        os.replace(a.spooled, a.path)
                    elif self._copy_inline:  # inline, durable in its row: the (unsynced) file is for a spool combiner
                        _write_copy(a.path, a.row.payload)
                for folder in {a.path.parent for a in arrivals if a.row.payload is None}:  # inline: the row holds it
                    fsync_dir(folder)
            except OSError as e:
                raise spool_error(e, "place the spooled update") from e
            if self._writer is None:
                self._writer = self._store.submission_writer()
            self._writer.add([a.row for a in arrivals])
        except BaseException:
            for path in copies:  # a failed group leaves no inline copy behind (nothing names them)
                path.unlink(missing_ok=True)
            raise

    def close(self) -> None:
        """Wait for a commit in progress and release the thread and the connection."""
        self._pool.shutdown(wait=True)
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _write_copy(path: Path, payload: bytes) -> None:
    """An inline update's spool file, written from its row's bytes (no fsync: recovery rewrites it from the row)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
