"""Recycled vector buffers: a device's `TrainingSession.to_buffer` and the coordinator's FedAvg mean write into
an array nobody holds any more.

A fresh multi-megabyte numpy array costs more than the copy into it: numpy asks the kernel for huge
pages, which the kernel zeroes (and may compact memory for), and the allocator hands big blocks back
to the kernel when they are freed, so every to_buffer of a 5 M-value model paid 7-12 ms of CPU in a
simulation worker against ~1 ms into memory that is already mapped. A buffer is handed out again
only when the pool holds the only reference to it (CPython's reference count: an array that a
caller, a view, a memoryview or a pending upload still refers to is never overwritten). The pool
keeps at most `keep` buffers, allocated on demand, so its resident memory is the peak number of
vectors that were alive at once (capped at `keep` of them), not a new cost.

The buffers are anonymous mappings of plain pages, not numpy's huge-page memory: in trials on the
2-core VM, the coordinator's write of a new 20 MB global vector file cost 15-40 ms of CPU instead of 5
in 13 of 17 trials while the workers held pooled huge-page buffers, against 2 of 10 without a pool and
2 of 14 with plain pages (benchmarks/README.md, issue 12 part 5; weak evidence, mechanism not pinned down).
On the coordinator, each round's fresh 20 MB mean array took 44-45 ms instead of 3 in 2 of 8 rounds (huge-page
faults on a VM that hands freed memory back to its host; issue 12 part 8).

It lives in the root package because both sides use it; it imports only the standard library and numpy.
"""

from __future__ import annotations

import mmap
import sys
import threading

import numpy as np

_FREE_REFS = 2   # sys.getrefcount(self._buffers[i]) when the list slot is the only holder (+ the call's argument)


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
                        buf.flags.writeable = True    # a previous holder may have frozen it
                        return buf
                    spare = i if spare is None else spare
            buf = _plain_pages(length)
            if len(self._buffers) < self.keep:
                self._buffers.append(buf)
            elif spare is not None:          # full: an unused buffer of another length makes room
                self._buffers[spare] = buf
            return buf

    def __len__(self) -> int:
        return len(self._buffers)


def _plain_pages(length: int) -> np.ndarray:
    """A writable float32 array over a fresh anonymous mapping (unmapped when the array is freed)."""
    return np.frombuffer(mmap.mmap(-1, max(1, 4 * length)), dtype=np.float32, count=length)


__all__ = ["BufferPool"]
