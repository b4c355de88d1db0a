"""The upload stream: one update's chunks checked, hashed, validated and spooled to disk as they arrive.

Each received chunk is counted against the payload size admission fixed, fed to the running
sha256 and to the codec's streaming decoder (a malformed payload fails on the chunk that breaks
it; every decoded value, plus the global vector for a delta codec, must be finite), and appended
to a temporary spool file. Nothing is kept in memory: a receiver holds one chunk and its decoded
pieces at a time, so memory is O(concurrent uploads × chunk), never O(P) per upload. The spool
file holds the payload exactly as received (its codec's bytes): the fold decodes it again after
the update is durable and acknowledged, and restart replay decodes it with its recorded codec.

The temp file is a committed round's spool file when one is free (`coordinator.spool_free`:
overwritten in place, truncated to the payload before the fsync), else a new file.
Every SYNC_EVERY bytes an fdatasync is started in a helper thread, so the disk works while the
next chunks arrive and the final fsync has little left to flush. A payload of at most
`inline_max` bytes is also kept in memory (`payload`) and its file is not fsynced: the engine
makes those bytes durable inside the submission row instead (one WAL fsync for a whole group
commit; recovery rewrites the spool file from the row), which saves a small update two fsyncs;
such a payload gets no temp file either (the group commit writes its spool file from the row). `finish()` checks completeness
and the digest and makes the file durable; the round engine renames it into place once it
accepts the update. A write that fails for lack of space (ENOSPC, EDQUOT) raises StorageError
(UNAVAILABLE "coordinator storage full"): the temp file is removed by `close()`, nothing changed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from fedort.common import digests
from fedort.common.errors import ProtocolError, ResourceExhaustedError, VectorError
from fedort.coordinator.aggregation.decode import DensePiece, check_reconstructed
from fedort.coordinator.state.storage import storage_error
from fedort.coordinator.uploads.admission import AdmittedUpdate
from fedort.coordinator.uploads.spool_free import FreeSpoolFiles

log = logging.getLogger(__name__)

SYNC_EVERY = 8 << 20  # start an fdatasync of the spool file every this many bytes (the tail left to the
# final fsync, after the last byte, stays ≤ 8 MB)


def spool_error(e: OSError, what: str) -> BaseException:
    """A StorageError (UNAVAILABLE, the device retries later) for a full disk, else the OSError itself."""
    full = storage_error(e)
    if full is None:
        return e
    log.warning("coordinator storage full: cannot %s (%s)", what, e)
    return full


class UpdateReceiver:
    """Receive one admitted update into `tmp_path`; nothing is visible until the engine renames it.

    Always `close()` it: that stops the helper thread and removes the temp file unless it was renamed.
    """

    def __init__(
        self,
        admitted: AdmittedUpdate,
        tmp_path: Path,
        max_chunk_bytes: int,
        inline_max: int = 0,
        free: FreeSpoolFiles | None = None,
    ) -> None:
        self.admitted = admitted
        self.tmp_path = tmp_path
        meta = admitted.header.vector
        self._what = f"{meta.codec or 'raw'} update of {admitted.header.client_id}"
        self._length = meta.length
        self._stream = (
            admitted.decoder.stream(meta.length, admitted.payload_bytes) if admitted.decoder.streams else None
        )
        # raw's stream decoder refuses non-finite values itself; checking its pieces again only matters for
        # other codecs and deltas (as coordinator.local_vectors does)
        self._again = admitted.base is not None or (meta.codec or "raw") != "raw"
        self._max_chunk = max_chunk_bytes
        self._hash = digests.new(meta.digest)  # sha256, or BLAKE3 where announced (admission checked it)
        self.received = 0
        self._fd = -1
        self._syncer: ThreadPoolExecutor | None = None
        self._sync: Future | None = None
        self._unsynced = 0
        self._kept = bytearray() if admitted.payload_bytes <= inline_max else None
        self._recycled = False
        if self._kept is not None:  # inline: no temp file; the group commit writes the spool file from the row
            return
        try:
            tmp_path.parent.mkdir(parents=True, exist_ok=True)
            # a committed round's spool file, overwritten in place (coordinator.spool_free), else a new one
            self._recycled = free is not None and free.claim(tmp_path, admitted.payload_bytes)
            self._fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | (0 if self._recycled else os.O_TRUNC), 0o600)
        except OSError as e:
            raise spool_error(e, "create a spool file") from e

    def add(self, chunk: bytes) -> None:
        """Check, hash, validate and spool one chunk (raises for a bad chunk, too many bytes, a malformed payload)."""
        n = len(chunk)
        if n == 0:
            raise ProtocolError("empty chunk in vector stream")
        if n > self._max_chunk:
            raise ResourceExhaustedError(f"chunk of {n} bytes exceeds the limit of {self._max_chunk}")
        if self.received + n > self.admitted.payload_bytes:
            raise VectorError(
                f"{self._what} carries more than the {self.admitted.payload_bytes} bytes its header declares"
            )
        self._hash.update(chunk)
        if self._stream is not None:
            pieces = self._stream.feed(chunk)
            if self._again:
                self._check(pieces)
        self.received += n
        if self._kept is not None:
            self._kept += chunk
            return
        view = memoryview(chunk)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as e:
            raise spool_error(e, "spool the update") from e
        self._unsynced += n
        if self._kept is None and self._unsynced >= SYNC_EVERY and (self._sync is None or self._sync.done()):
            if self._syncer is None:
                self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedort-spool-sync")
            self._sync = self._syncer.submit(os.fdatasync, self._fd)
            self._unsynced = 0

    async def sync(self) -> None:
        """Make the bytes received so far durable (a resumable upload acknowledges a part only then); an inline
        payload is held in memory until its group commit, as a streamed one is."""
        if self._fd < 0:
            return
        try:
            if self._sync is not None:  # the background fdatasync covers bytes no longer in _unsynced
                await asyncio.wrap_future(self._sync)
            if self._unsynced:
                await asyncio.to_thread(os.fdatasync, self._fd)
        except OSError as e:
            raise spool_error(e, "make the spooled part durable") from e
        self._unsynced = 0

    def _check(self, pieces) -> None:
        for piece in pieces:
            check_reconstructed(piece, self.admitted.base, self._what)

    @property
    def payload(self) -> bytes | None:
        """The received bytes of an inline payload (None for one that only the spool file holds)."""
        return None if self._kept is None else bytes(self._kept)

    def _seal(self) -> None:
        try:
            if self._sync is not None:
                self._sync.result()
            if self._recycled:  # whatever the recycled file held beyond this payload
                os.ftruncate(self._fd, self.received)
            if self._kept is None:  # an inline payload becomes durable in its row
                os.fsync(self._fd)
        except OSError as e:
            raise spool_error(e, "make the spooled update durable") from e
        if self._stream is None:  # a decoder that cannot stream: validate the complete payload once
            payload = (
                np.frombuffer(self._kept, np.uint8)
                if self._kept is not None
                else np.fromfile(self.tmp_path, dtype=np.uint8)
            )
            values = self.admitted.decoder.decode(payload, self._length)
            self._check([DensePiece(0, np.asarray(values, dtype=np.float32))])

    async def finish(self) -> None:
        """Return once all bytes arrived, the digest matches, the payload decodes to finite values and is on disk."""
        want = self.admitted.payload_bytes
        if self.received != want:
            raise VectorError(
                f"{self._what} ended after {self.received} of {want} bytes (the size its header declares)"
            )
        if self._stream is not None:
            pieces = self._stream.finish()
            if self._again:
                self._check(pieces)
        digest = self._hash.digest()
        expected = self.admitted.header.vector.sha256
        if digest != expected:
            raise VectorError(
                f"vector {self.admitted.header.vector.digest or 'sha256'} mismatch: header says {expected.hex()[:16]}…, "
                f"received bytes hash to {digest.hex()[:16]}…"
            )
        if self._kept is None or self._stream is None:  # (an inline payload checked as it streamed: nothing left)
            await asyncio.to_thread(self._seal)

    def close(self) -> None:
        """Release the helper thread and the file descriptor; remove the temp file if it was not renamed."""
        if self._syncer is not None:
            self._syncer.shutdown(wait=True)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._kept is None:
            self.tmp_path.unlink(missing_ok=True)
