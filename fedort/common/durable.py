"""Crash-safe files: the one `atomic_write` (and its fsync helpers) of the coordinator and the device.

    temp file in the target's folder -> write -> fsync -> rename over the target -> fsync the folder

so a crash, a kill or a full disk at any moment leaves either the old file or the complete new one
under the final name, never a partial one, and the rename itself survives a power cut. The temp
name is unique per call (`tempfile.mkstemp`), so threads writing the same folder never collide,
and a failed write removes its temp file.

It lives in the root package because both sides need it and it is not part of the wire contract
(`fedort.protos`); it imports only the standard library and numpy, so a device can load it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import sys
import tempfile
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any, Union

import numpy as np

Data = Union[bytes, bytearray, memoryview, np.ndarray, Iterable[bytes | bytearray | memoryview]]
WRITEBACK_STEP = 4 << 20  # a durable write starts each step's writeback as it goes, so its fsync waits for less


def _libc_sync_file_range():
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


_SYNC_FILE_RANGE = _libc_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start writeback of the range's dirty pages not already under writeback


def start_writeback(fd: int, offset: int = 0, nbytes: int = 0) -> bool:
    """Start writing `nbytes` from `offset` of an open file to disk (0: to its end) without waiting for it (Linux
    `sync_file_range` SYNC_FILE_RANGE_WRITE); False where that call is missing or failed. Not durability: an
    fsync still has to follow, and waits only for what is left."""
    return _SYNC_FILE_RANGE is not None and _SYNC_FILE_RANGE(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE) == 0


def fsync_dir(path: str | os.PathLike) -> None:
    """Make renames and new entries in folder `path` durable (a no-op where folders cannot be opened)."""
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike, *, data_only: bool = False) -> None:
    """Flush a file someone else wrote (e.g. ONNX Runtime's export, a co-located device's update) to stable
    storage. `data_only`: fdatasync, its data and size but not its times (a rename changed only its ctime)."""
    with open(path, "rb") as f:
        (os.fdatasync if data_only else os.fsync)(f.fileno())


def _chunks(data: Data) -> Iterable[bytes | bytearray | memoryview]:
    if isinstance(data, np.ndarray):
        return (np.ascontiguousarray(data).data.cast("B"),)
    if isinstance(data, (bytes, bytearray, memoryview)):
        return (data,)
    return data


def private_file(path: str | os.PathLike) -> None:
    """Create `path` readable and writable by its owner only (0600), or narrow an existing file to that: for files
    that hold devices' updates or secrets (SQLite gives its -wal and -shm files the database file's mode)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    os.chmod(path, 0o600)


def atomic_write(path: str | os.PathLike, data: Data, *, durable: bool = True, sync_dir: bool = True) -> None:
    """Write `data` (bytes, a numpy array's raw bytes, or an iterable of byte chunks) to `path` atomically.

    Creates the parent folder if needed. If writing fails (or the chunk iterator raises), the old
    file is untouched, the temp file is removed and the exception propagates. `durable=False` skips
    both fsyncs: still atomic for other processes and a crash of this one, but a power cut may lose
    or tear the file — only for caches that verify what they read (e.g. by its sha256).
    `sync_dir=False`: the caller fsyncs the folder itself (once for several files written into it).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb", buffering=0) as f:
            written = 0
            for chunk in _chunks(data):
                view = memoryview(chunk).cast("B")
                while view:  # a large durable write: each WRITEBACK_STEP goes to disk while the next is written
                    n = f.write(view[:WRITEBACK_STEP] if durable and len(view) > WRITEBACK_STEP else view)
                    if durable and n >= WRITEBACK_STEP:
                        start_writeback(f.fileno(), written, n)
                    view, written = view[n:], written + n
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable and sync_dir:
        fsync_dir(path.parent)


_PARTIAL = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")  # atomic_write's temp names: .NAME.XXXXXXXX.tmp


def drop_partial_writes(folder: str | os.PathLike) -> list[Path]:
    """Remove the temp files an atomic_write into `folder` left when its process was killed mid-write;
    the files they were replacing are untouched. Returns what was removed."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in Path(folder).iterdir():
            if _PARTIAL.match(entry.name) and entry.is_file() and not entry.is_symlink():
                entry.unlink(missing_ok=True)
                removed.append(entry)
    return removed


def drop_cached(*paths: str | os.PathLike) -> None:
    """Ask the kernel to drop these durable files' pages from the page cache (best effort, Linux).

    A coordinator writes large new files every round (global vector, model) and rarely reads them
    again. On a VM whose guest hands free memory back to the host (free page reporting), a write into
    pages that were handed back pays a host fault per page. Pages freed here just before such a write are
    taken by it before they are reported, so the round's commit drops g_{r-1}'s file right before it
    writes g_{r+1}'s.
    A dropped file is read back from disk if it is needed again. Dirty pages are not dropped."""
    advise = getattr(os, "posix_fadvise", None)
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            if advise is not None:
                advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


def atomic_write_json(path: str | os.PathLike, obj: Any, *, sync_dir: bool = True) -> None:
    """`obj` as indented, key-sorted JSON, written atomically (`sync_dir` as for `atomic_write`)."""
    atomic_write(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode(), sync_dir=sync_dir)


def fsync_tree(root: str | os.PathLike, skip: Collection[str] = ()) -> int:
    """fsync every file and folder under `root` (following folder links, e.g. a state dir on tmpfs)
    but the entries of `root` named in `skip`; the number of files. Each fsync costs a few ms on a
    busy disk even when nothing is left to flush, so skip what its writer already made durable."""
    count = 0
    for folder, subfolders, files in os.walk(os.fspath(root), followlinks=True):
        if folder == os.fspath(root):
            subfolders[:] = [d for d in subfolders if d not in skip]
            files = [f for f in files if f not in skip]
        for name in files:
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                fsync_file(path)
                count += 1
        fsync_dir(folder)
    return count


__all__ = [
    "atomic_write",
    "atomic_write_json",
    "drop_partial_writes",
    "fsync_dir",
    "fsync_file",
    "fsync_tree",
    "start_writeback",
]
