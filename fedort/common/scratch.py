"""Block-sized scratch buffers, reused across calls and threads: work done in cache-sized blocks (mask
keystreams, fixed-point encoding) borrows one for the length of a call instead of allocating its own.

A fresh buffer of a few hundred KiB is above the allocator's mapping threshold, so each call would map
fresh pages and fault them in one by one, and a host of many devices does that for each of them. A free
list holds the buffers no call is using: a process keeps as many as ran at once, never more.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_FREE: list[bytearray] = []
_LOCK = threading.Lock()


@contextmanager
def scratch(nbytes: int) -> Iterator[bytearray]:
    """A bytearray of at least `nbytes` bytes (contents undefined) that nobody else uses until this exits."""
    with _LOCK:
        found = next((i for i in range(len(_FREE) - 1, -1, -1) if len(_FREE[i]) >= nbytes), None)
        buf = _FREE.pop(found) if found is not None else None
    if buf is None:
        buf = bytearray(nbytes)
    try:
        yield buf
    finally:
        with _LOCK:
            _FREE.append(buf)


__all__ = ["scratch"]
