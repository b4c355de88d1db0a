"""An exclusive, non-blocking lock on an open file that the kernel drops when its process dies (even by SIGKILL).

`flock` on POSIX (two descriptors conflict even within one process), `msvcrt.locking` on Windows. Used
where a file or folder belongs to one running process: a device's saved identity, a training session's
scratch folder. Standard library only, so both sides may use it.
"""

from __future__ import annotations

import os
from typing import IO, Any


def lock_nonblocking(f: IO[Any]) -> None:
    """Lock open file `f` for this process, or raise OSError at once if another descriptor holds it."""
    if os.name == "posix":
        import fcntl

        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:  # pragma: no cover - Windows
        import msvcrt

        # Windows only; mypy checks as the host platform
        msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]


__all__ = ["lock_nonblocking"]
