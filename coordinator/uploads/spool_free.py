"""Recycled spool files for streamed uploads: a committed round's large spool files are overwritten, not re-created.

A streamed update of P bytes written to a new file costs the coordinator's receiving thread a page
allocation per 4 KiB and the fsync a block allocation; written over a file of the same size whose
pages the page cache still holds, it is a plain copy, and both the write and the fsync cost less.
So `drop_spool` moves a committed round's spool files of at least MIN_BYTES
into SPOOL/.free (at most KEEP files and KEEP_BYTES; the co-located path's own pool,
coordinator.local_vectors, comes first), and `UpdateReceiver` claims one by renaming it to its
temp spool name and writes from offset 0, truncating to the received size before the fsync.
The pool keeps only as many files as streamed uploads asked for since the last recycling, so a
run whose updates do not stream (`fedort simulate`'s files) holds no extra disk.

The pool is the coordinator's private directory (devices never name a file in it); it holds no
one's data that counts: it is emptied when the engine starts and when it closes, and a claimed
file that fails its checks is removed like any temp spool file.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

FREE = ".free"  # under the state dir's spool folder (round folders are "round-NNNN")
KEEP = 32  # at most this many recycled files ...
KEEP_BYTES = 1 << 30  # ... holding at most this many bytes
MIN_BYTES = 1 << 20  # smaller files are deleted (a small update is cheap to write anew)
_NAMES = itertools.count()


class Recycler(Protocol):
    """A pool that takes committed spool files to overwrite later (`FreeSpoolFiles`, `LocalVectorDir`)."""

    def recycle(self, files: list[Path]) -> list[Path]:
        """Take what it has room for; returns the files not taken."""
        ...


def drop_spool(spool: Path, recyclers: Iterable[Recycler]) -> None:
    """Delete a committed round's spool folder `spool`; its files are offered to each of `recyclers` in turn
    first (overwritten in a later round instead of re-created), the rest are deleted."""
    if not spool.is_dir():
        return
    files = list(spool.iterdir())
    for pool in recyclers:
        files = pool.recycle(files)
    for f in files:
        f.unlink(missing_ok=True)
    spool.rmdir()


class FreeSpoolFiles:
    """The pool (see the module docstring); every method tolerates a concurrent claim or recycle."""

    def __init__(self, spool: Path) -> None:
        self.path = spool / FREE
        self.asked = 0  # claims of MIN_BYTES or more since the last `recycle`: how many files are worth keeping

    def recycle(self, files: list[Path]) -> list[Path]:
        """Move `files` (committed spool files) into the pool while it has room and streamed uploads asked for
        that many since the last call; returns the ones not moved."""
        wanted, self.asked = self.asked, 0
        return move_into(self.path, files, min(KEEP, wanted), KEEP_BYTES, MIN_BYTES) if wanted else files

    def claim(self, target: Path, nbytes: int) -> bool:
        """Rename a pool file to `target` (which must not exist): the smallest holding >= `nbytes`, else the
        largest; False if the pool is empty or every rename lost a race (the caller creates a new file)."""
        if nbytes < MIN_BYTES:
            return False
        self.asked += 1
        try:
            sizes = [(e.stat().st_size, e.path) for e in os.scandir(self.path) if e.is_file(follow_symlinks=False)]
        except OSError:
            return False
        big = sorted(s for s in sizes if s[0] >= nbytes)
        for _, path in big + sorted((s for s in sizes if s[0] < nbytes), reverse=True):
            try:
                os.rename(path, target)
                return True
            except OSError:
                continue
        return False

    def clear(self) -> None:
        """Delete every pool file (at start and at close: they hold no update that counts)."""
        empty(self.path)


def move_into(folder: Path, files: list[Path], keep: int, keep_bytes: int, min_bytes: int = 0) -> list[Path]:
    """Move committed spool `files` of at least `min_bytes` into `folder` (a recycling pool, here or
    coordinator.local_vectors') while it holds fewer than `keep` files and `keep_bytes` bytes, each under a
    fresh name; returns the files not moved (the caller deletes them)."""
    try:
        folder.mkdir(exist_ok=True)
        held = [e.stat().st_size for e in os.scandir(folder) if e.is_file(follow_symlinks=False)]
    except OSError:
        return files
    count, size, left = len(held), sum(held), []
    for f in files:
        try:
            n = f.lstat().st_size
            if n < min_bytes or count >= keep or size + n > keep_bytes or f.name.endswith(".tmp"):
                raise OSError("not kept")
            os.rename(f, folder / f"{os.getpid()}-{next(_NAMES)}.f32")
            count, size = count + 1, size + n
        except OSError:
            left.append(f)
    return left


def empty(folder: Path) -> None:
    """Delete every file in a recycling pool `folder` (missing: nothing to do)."""
    try:
        for e in os.scandir(folder):
            if e.is_file(follow_symlinks=False) or e.is_symlink():
                os.unlink(e.path)
    except OSError:
        pass
