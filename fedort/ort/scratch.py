"""A training session's own folder for the files ORT wants on disk: models given as bytes, and the checkpoint
saved without optimizer state that `reset_optimizer_state` reloads (ORT 1.19 loads a checkpoint from a path only).

The folder lives under a root its owner names (the device cache's `sessions/`; by default
`fedort.common.cache_root()/sessions`), never in the system temp dir, and is made only when a file is
first needed. Beside each folder `NAME/` lies `NAME.lock`, locked by the owning process while the folder
exists; the kernel drops the lock when that process dies, even by SIGKILL. So a new session first
removes the folders under its root whose lock no process holds: what killed processes left behind
goes the next time a session starts there. A garbage-collected session (or one at interpreter exit)
removes its own.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import weakref
from pathlib import Path
from typing import IO, Any

from fedort.common.cache_root import cache_root
from fedort.common.file_lock import lock_nonblocking

PREFIX = "fedort-session-"
LOCK = ".lock"
_ATTEMPTS = 100  # names tried; each loses only to a sweeper that took its fresh lock file for stale


def default_root() -> Path:
    """Where sessions keep their folders unless their owner names a root."""
    return cache_root() / "sessions"


class ScratchDir:
    """One session's folder under `root` (see the module docstring); `path` makes it on first use."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()
        self._path: Path | None = None
        self._finalizer: weakref.finalize | None = None
        if self.root.is_dir():
            remove_stale(self.root)

    @property
    def path(self) -> Path:
        if self._path is None:
            self.root.mkdir(parents=True, exist_ok=True)
            path, lock = _claim(self.root)
            self._path = path
            self._finalizer = weakref.finalize(self, _remove, path, lock)
        return self._path

    def file(self, name: str) -> Path:
        """The path of `name` in the folder (made if need be)."""
        return self.path / name

    def cleanup(self) -> None:
        """Remove the folder now (it is also removed when this object is collected, or at exit)."""
        if self._finalizer is not None:
            self._finalizer()


def remove_stale(root: Path) -> list[Path]:
    """Remove the folders under `root` whose owner is gone (their lock is free); returns them."""
    removed = []
    for lock_path in sorted(root.glob(PREFIX + "*" + LOCK)):
        folder = lock_path.with_name(lock_path.name[: -len(LOCK)])
        try:
            f = open(lock_path, "a+")
        except OSError:
            continue  # removed meanwhile by its owner or another sweeper
        try:
            lock_nonblocking(f)
        except OSError:
            f.close()  # a live process owns it
            continue
        _remove(folder, f)
        removed.append(folder)
    for folder in root.glob(PREFIX + "*"):  # a folder without its lock file has no owner (see _claim)
        if folder.is_dir() and not folder.with_name(folder.name + LOCK).exists():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _claim(root: Path) -> tuple[Path, IO[Any]]:
    """A new folder under `root` and its lock file, locked. The lock is taken (and checked to be the file still
    at its path, not one a sweeper removed meanwhile) before the folder is made, so every folder has one."""
    for _ in range(_ATTEMPTS):
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        lock_path = root / (name + LOCK)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        f = os.fdopen(fd, "a+")
        try:
            lock_nonblocking(f)  # a new file: only a sweeper that took it for stale can hold it
            same = os.path.samestat(os.fstat(f.fileno()), os.stat(lock_path))
        except OSError:
            same = False
        if not same:
            f.close()
            continue
        folder = root / name
        folder.mkdir()
        return folder, f
    raise OSError(f"could not lock a new session folder under {root} (does its file system support file locks?)")


def _remove(folder: Path, lock: IO[Any]) -> None:
    """Remove `folder`, then its lock file, then let the lock go (in that order: see `remove_stale`)."""
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.unlink(folder.with_name(folder.name + LOCK))
    lock.close()


__all__ = ["PREFIX", "ScratchDir", "default_root", "remove_stale"]
