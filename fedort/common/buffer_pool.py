"""Recycled vector buffers: a device's `TrainingSession.to_buffer` and the coordinator's FedAvg mean write into
an array nobody holds any more.

A fresh multi-megabyte numpy array costs more than the copy into it: numpy asks the kernel for huge
pages, which the kernel zeroes (and may compact memory for), and the allocator hands big blocks back
to the kernel when they are freed, so every to_buffer of a large model would pay for fresh pages instead of
a copy into memory that is already mapped. A buffer is handed out again
only when the pool holds the only reference to it (CPython's reference count: an array that a
caller, a view, a memoryview or a pending upload still refers to is never overwritten). The pool
keeps at most `keep` buffers, allocated on demand, so its resident memory is the peak number of
vectors that were alive at once (capped at `keep` of them), not a new cost.

The buffers are anonymous mappings of plain pages, not numpy's huge-page memory: pooled huge-page
buffers made the coordinator's writes of new files slower more often (weak evidence, mechanism not
pinned down), and fresh huge-page arrays fault slowly on a VM that hands freed memory back to its host.

It lives in the root package because both sides use it; it imports only the standard library and numpy.
"""

from __future__ import annotations

import mmap
import sys
import threading

import numpy as np

_FREE_REFS = 2  # sys.getrefcount(self._buffers[i]) when the list slot is the only holder (+ the call's argument)


class BufferPool:
    """Up to `keep` float32 arrays, reused once nothing outside the pool refers to them (module docstring)."""

    def __init__(self, keep: int) -> None:
        if keep < 0:
            raise ValueError(f"a buffer pool keeps zero or more buffers, got {keep}")
        self.keep = keep
        self._buffers: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, length: int) -> np.ndarray:
        """A float32 array of `length` elements that nothing else refers to (contents undefined)."""
        with self._lock:
            spare = None
            for i in range(len(self._buffers)):
                if sys.getrefcount(self._buffers[i]) == _FREE_REFS:
                    if len(self._buffers[i]) == length:
                        buf = self._buffers[i]
                        buf.flags.writeable = True  # a previous holder may have frozen it
                        return buf
                    spare = i if spare is None else spare
            buf = _plain_pages(length)
            if len(self._buffers) < self.keep:
                self._buffers.append(buf)
            elif spare is not None:  # full: an unused buffer of another length makes room
                self._buffers[spare] = buf
            return buf

    def __len__(self) -> int:
        return len(self._buffers)


def _plain_pages(length: int) -> np.ndarray:
    """A writable float32 array over a fresh anonymous mapping (unmapped when the array is freed)."""
    return np.frombuffer(mmap.mmap(-1, max(1, 4 * length)), dtype=np.float32, count=length)


__all__ = ["BufferPool"]
