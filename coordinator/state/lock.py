"""`StateDirLock`: one coordinator per state dir, enforced by an exclusive `flock` on `coordinator.lock`.

Two coordinators on one state dir would both write `state.db` and the spool (clients then see
UNIQUE-constraint errors and stray spool files remain). The lock is an advisory `fcntl.flock`
on a file inside the state dir, held for the whole life of the server: the kernel drops it when
the process dies, however it dies, so a crashed coordinator never leaves a stale lock. The file
holds the holder's pid, so the refusal can name it.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from fedort.common.errors import ConfigError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock, no lock (documented in the README)
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = "coordinator.lock"


class StateDirLock:
    """Exclusive ownership of a state dir by this process; `acquire` raises ConfigError naming the holder."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock without waiting: a second coordinator must fail at once, not queue behind the first."""
        if self._fd is not None or fcntl is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise ConfigError(
                f"state dir {self.path.parent} is in use by another coordinator "
                f"(pid {holder_pid(self.path) or 'unknown'}, lock {self.path}); stop it first, "
                "or use another --state-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (idempotent); the file stays, its content is only a hint for the next refusal."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)  # closing the only descriptor releases the flock

    def __enter__(self) -> StateDirLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def holder_pid(path: Path) -> int | None:
    """The pid written in a lock file (None when empty or unreadable)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


__all__ = ["LOCK_NAME", "StateDirLock", "holder_pid"]
