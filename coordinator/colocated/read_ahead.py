"""A file's bytes read and hashed in a thread of their own, a few steps ahead of the thread that uses them.

A co-located update's take reads its file, hashes it (BLAKE3) and checks and folds it. In one thread
those add up per update, and the fold thread takes a round's updates one after another: once the
devices have written their files, the second core idles
while the last takes queue up. Here the reading and hashing run beside the check and fold, so a take
costs about its check and fold in wall time when a core is free (a little more CPU for the hand-overs).

The reader stays at most SLOTS steps ahead, in a pooled ring of SLOTS slots, and waits on nothing but its
own consumer's progress and the disk; `close` (the context manager's exit) stops it and waits for it, so
a slot is never overwritten while in use and the ring is never written after it is handed back.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from fedort.common import digests
from fedort.common.buffer_pool import BufferPool
from fedort.common.errors import VectorError
from fedort.common.invariants import present

if TYPE_CHECKING:
    import numpy as np

SLOTS = 4  # steps the reader may run ahead (a ring of SLOTS × step bytes)
_RINGS = BufferPool(4)  # recycled rings: a fresh one would page-fault every take


class ReadAhead:
    """The file's `n` bytes as parts of `step` bytes (the last may be shorter), in order, each hashed into
    `hasher` before it is yielded; a part is valid until the next one is asked for. A file of one part is
    read in the consumer's thread: there is nothing to overlap."""

    def __init__(self, fd: int, n: int, hasher: digests.Hasher, what: str, step: int) -> None:
        self.n, self.what, self._fd, self._hasher = n, what, fd, hasher
        self.step = max(4, step // 4 * 4)  # whole float32 values per part
        self.parts = -(-n // self.step)
        self._cond = threading.Condition()
        self._read = self._used = 0  # parts read and hashed / parts the consumer is done with
        self._error: BaseException | None = None
        self._stop = False
        self._thread: threading.Thread | None = None
        if self.parts <= 1:
            self._ring: np.ndarray | None
            self._mem: memoryview | None
            self._ring, self._mem = None, memoryview(bytearray(n))
            return
        self._ring = _RINGS.take(SLOTS * self.step // 4)
        self._mem = self._ring.data.cast("B")
        # a thread of its own (cheap to start): a shared pool's readers would wait for their consumers while
        # other consumers wait for a reader the pool cannot start
        self._thread = threading.Thread(target=self._run, name="fedort-read-ahead", daemon=True)
        self._thread.start()

    def _slot(self, i: int) -> memoryview:
        """Where part i goes in the ring (all of it for a one-part file)."""
        at = i % SLOTS * self.step
        return present(self._mem, "the ring (a closed reader has none)")[
            at : at + min(self.step, self.n - i * self.step)
        ]

    def _fill(self, i: int) -> memoryview:
        """Part i read into its slot and hashed."""
        part, got = self._slot(i), 0
        while got < len(part):  # a regular file reads short only at its end
            k = os.readv(self._fd, [part[got:]])
            if k <= 0:
                raise VectorError(f"{self.what} ended after {i * self.step + got} of {self.n} bytes")
            got += k
        self._hasher.update(part)
        return part

    def _run(self) -> None:
        try:
            for i in range(self.parts):
                with self._cond:
                    while not self._stop and i - self._used >= SLOTS:
                        self._cond.wait()
                    if self._stop:
                        return
                self._fill(i)
                with self._cond:
                    self._read = i + 1
                    self._cond.notify()
        except BaseException as e:  # handed to the consumer, which raises it
            with self._cond:
                self._error = e
                self._cond.notify()

    def __iter__(self) -> Iterator[memoryview]:
        if self._thread is None:
            if self.parts:
                yield self._fill(0)
            return
        for i in range(self._used, self.parts):
            with self._cond:
                while self._read <= i and self._error is None:
                    self._cond.wait()
                if self._read <= i:
                    raise present(self._error, "the reader's error")
            yield self._slot(i)
            with self._cond:
                self._used = i + 1
                self._cond.notify()

    def close(self) -> None:
        """Stop the reader and wait for it; the ring goes back to the pool."""
        if self._thread is not None:
            with self._cond:
                self._stop = True
                self._cond.notify()
            self._thread.join()
        self._mem = self._ring = None  # a view still held elsewhere keeps the ring out of the pool


@contextmanager
def read_ahead(fd: int, n: int, hasher: digests.Hasher, what: str, step: int) -> Iterator[ReadAhead]:
    """`ReadAhead` over `fd`'s next `n` bytes, closed on exit (also when its consumer stopped early)."""
    reader = ReadAhead(fd, n, hasher, what, step)
    try:
        yield reader
    finally:
        reader.close()


__all__ = ["ReadAhead", "read_ahead"]
