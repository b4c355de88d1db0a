"""The upload stream: one update's chunks checked, hashed and spooled to disk as they arrive.

Each received chunk goes into the preallocated vector and the running sha256
(protos.codec.VectorAssembler) and is appended to a temporary spool file; every SYNC_EVERY bytes
an fdatasync is started in a helper thread, so the disk works while the next chunks arrive and
the final fsync has little left to flush. `finish()` checks the digest and finiteness and makes
the file durable; the round engine renames it into place once it accepts the update.

Measured on the 2-vCPU dev VM (benchmarks/bench_transfer.py): doing the copy, hash and write
inline on the event loop is faster than handing every chunk to worker threads, whose hand-offs
and GIL traffic cost more than they overlap when client and server share two cores.
"""

from __future__ import annotations

import asyncio
import math
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from fedort.coordinator.aggregation import decoder_for
from fedort.protos.codec import VectorAssembler
from fedort.protos.errors import VectorError

SYNC_EVERY = 32 << 20     # start an fdatasync of the spool file every this many bytes


class UpdateReceiver:
    """Receive one update into memory and into `tmp_path`; nothing is visible until the engine renames it.

    Always `close()` it: that stops the helper thread and removes the temp file unless it was renamed.
    """

    def __init__(self, assembler: VectorAssembler, tmp_path: Path) -> None:
        self.assembler = assembler
        self.tmp_path = tmp_path
        tmp_path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._syncer: ThreadPoolExecutor | None = None
        self._sync: Future | None = None
        self._unsynced = 0

    def add(self, chunk: bytes) -> None:
        """Check, hash, copy and spool one chunk (raises for an oversized chunk or too many bytes)."""
        self.assembler.add(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(self._fd, view):]
        self._unsynced += len(chunk)
        if self._unsynced >= SYNC_EVERY and (self._sync is None or self._sync.done()):
            if self._syncer is None:
                self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedort-spool-sync")
            self._sync = self._syncer.submit(os.fdatasync, self._fd)
            self._unsynced = 0

    def _seal(self, vector: np.ndarray) -> bool:
        if self._sync is not None:
            self._sync.result()
        os.fsync(self._fd)
        if not decoder_for(self.assembler.meta.codec).float_payload:
            return True                     # e.g. a masked secagg-u64 update: integers, not float values
        # the float64 sum of finite float32 values cannot overflow: a finite sum <=> all values finite
        return math.isfinite(float(np.add.reduce(vector, dtype=np.float64)))

    async def finish(self) -> np.ndarray:
        """The vector, once all bytes arrived, the digest matches, every value is finite and the file is on disk."""
        vector = self.assembler.finish()
        if not await asyncio.to_thread(self._seal, vector):
            raise VectorError("update contains non-finite values (NaN or Inf); nothing was stored")
        return vector

    def close(self) -> None:
        """Release the helper thread and the file descriptor; remove the temp file if it was not renamed."""
        if self._syncer is not None:
            self._syncer.shutdown(wait=True)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.tmp_path.unlink(missing_ok=True)
