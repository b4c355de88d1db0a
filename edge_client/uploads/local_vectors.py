"""A device on the coordinator's own host: vectors through the coordinator's directory, not gRPC streams.

When the JoinReply names a `local_vector_dir` (the coordinator opted in: `fedort simulate` does,
a deployed coordinator only with `--local-vector-dir`), the device

- reads a task's global vector from DIR/global/<sha256 hex>.f32 (into an array of the process's
  that nothing holds any more) and uses it only if it has the model's length and the Task's digest
  (its BLAKE3, `vector_blake3`, when the coordinator sent one (protocol 1.5), else its sha256;
  otherwise it downloads it, as always);
- hands an update over as a file when the global vector it trained from is visible there (so it
  does share the coordinator's filesystem): DIR/<client_id>.<random>.f32 is written (into one of the
  coordinator's recycled files, DIR/.free/*, claimed by renaming it, when there is one) and its writeback
  to disk started, not waited for (`sync_file_range`, Linux; elsewhere fdatasync): every coordinator
  fdatasyncs a handed-over file before it acknowledges it, and by then most of it is on disk; the disk
  meanwhile writes this file while the process writes its next one. Then SubmitUpdate carries the header
  alone with `local_file` = that name. The file is removed
  whatever the answer (after an acceptance the coordinator has already moved it), and every retry
  writes a fresh one. The header's digest is computed while the bytes are written, block by block
  (each block is hashed and written while it is in the CPU's cache: one pass over the update instead of two),
  except on a first attempt to a coordinator that hashes handed-over files itself (JoinReply.hashes_local_files,
  protocol 1.6): it reads and hashes the file anyway, so the header goes without a digest value and the
  update is hashed once, not twice (`sender`); a resend carries its digest.
  A process writes one such file at a time (its clients' updates queue for the page cache, first come
  first written), so the first update is handed over early instead of every file finishing together.

Fallback: a device on another host, or one that cannot write the file, streams the update; so does
one whose coordinator refuses the reference with INVALID_ARGUMENT (e.g. it restarted without the
option), and that device stops trying for the rest of the session.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import stat
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from fedort.common import digests
from fedort.common.buffer_pool import BufferPool
from fedort.common.durable import start_writeback
from fedort.common.errors import FedortError
from fedort.edge_client.transport.grpc_transport import Transport
from fedort.protos.messages import SubmitResult, UpdateHeader
from fedort.protos.vector_stream import byte_view, vector_digest

log = logging.getLogger("fedort.edge.local")
FREE = ".free"  # the coordinator's recycled files (coordinator.local_vectors.FREE)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
WRITE_BLOCK = 256 << 10  # bytes hashed and written per step (stays in the CPU's cache in between)
# global vectors are read into recycled arrays, shared by the clients of a process (a simulation worker's): the
# one the cache holds for the round being trained and the next round's (fedort.common.buffer_pool; a fresh array
# per round may page-fault anew)
_READS = BufferPool(2)
# One update file written at a time per process (a simulation worker hosts many clients): files written
# side by side all finish late; one after the other, the first is handed over early and the coordinator's
# takes (one at a time) start sooner.
_DISK = threading.Lock()


def _matches(vector: np.ndarray, sha256: bytes, blake3: bytes) -> bool:
    """`vector`'s bytes have the Task's BLAKE3 (when given, 32 bytes, and computable here), else its sha256."""
    if len(blake3) == 32 and digests.BLAKE3 in digests.available():
        return vector_digest(vector, digests.BLAKE3) == blake3
    return vector_digest(vector) == sha256


class LocalVectors:
    """The device's side of the coordinator's local vector directory (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.path = Path(directory)
        self.enabled = True

    def _global(self, sha256: bytes) -> Path:
        return self.path / "global" / f"{sha256.hex()}.f32"

    def read_global(self, sha256: bytes, length: int, blake3: bytes = b"") -> np.ndarray | None:
        """The global vector with digest `sha256` from the directory, or None (absent, wrong length or digest).

        With `blake3` (Task.vector_blake3, protocol 1.5) and the `blake3` package here, the bytes are checked
        against that instead of sha256 (faster); both digests came from the coordinator in the same Task."""
        if not self.enabled or len(sha256) != 32:
            return None
        path = self._global(sha256)
        try:
            if os.stat(path).st_size != 4 * length:
                return None
            vector = _read_exactly(path, _READS.take(length))
        except (OSError, ValueError):
            return None
        if vector is None or not _matches(vector, sha256, blake3):
            log.debug("global vector %s… in %s does not match its name; downloading", sha256.hex()[:12], self.path)
            return None
        return vector

    def shares_host(self, global_sha256: bytes, length: int) -> bool:
        """The coordinator's global vector `global_sha256` is visible here: this device shares its filesystem."""
        try:
            return self.enabled and os.stat(self._global(global_sha256)).st_size == 4 * length
        except (OSError, ValueError):
            return False

    def sender(
        self, transport: Transport, header: UpdateHeader, body: np.ndarray | bytes, coordinator_hashes: bool
    ) -> Callable[[], SubmitResult]:
        """`submit` as a call to retry: with `coordinator_hashes` (JoinReply.hashes_local_files) its first attempt
        hands a file over with the header's empty digest value left empty; every later one (a resend) carries it."""
        attempts = itertools.count()
        return lambda: self.submit(transport, header, body, unhashed=coordinator_hashes and next(attempts) == 0)

    def submit(
        self, transport: Transport, header: UpdateHeader, body: np.ndarray | bytes, unhashed: bool = False
    ) -> SubmitResult:
        """Hand the update over as a file if this device can, else stream it. A header whose digest value is
        empty (`EncodedUpdate.stream(digested=False)`) gets it here: from the file's write, or a pass of its own;
        `unhashed`: a file goes without it (the coordinator hashes it, protocol 1.6; a stream always carries it)."""
        if self.shares_host(header.trained_from_sha256, header.vector.length):
            name = f"{header.client_id}.{secrets.token_hex(8)}.f32"
            path = self.path / name
            try:
                try:
                    hasher = None if header.vector.sha256 or unhashed else digests.new(header.vector.digest)
                    _write_file(path, body, self.path / FREE, hasher)
                except OSError as e:
                    self._give_up(f"cannot write {path} ({e.strerror or e})")
                else:
                    if hasher is not None:
                        header = replace(header, vector=replace(header.vector, sha256=hasher.digest()))
                    try:
                        return transport.submit_update(replace(header, local_file=name), b"")
                    except FedortError as e:
                        if getattr(e, "code", None) != "INVALID_ARGUMENT":
                            raise
                        self._give_up(f"the coordinator refused the file: {e}")
            finally:
                path.unlink(missing_ok=True)
        return transport.submit_update(with_digest(header, body), body)  # the one streaming path (fallbacks too)

    def _give_up(self, why: str) -> None:
        self.enabled = False
        log.warning("co-located vector path off for this session (%s); streaming updates instead", why)


def _read_exactly(path: Path, out: np.ndarray) -> np.ndarray | None:
    """`out` filled with the file's first out.nbytes bytes; None if the file is shorter."""
    view, done = out.data.cast("B"), 0
    with open(path, "rb", buffering=0) as f:
        while done < len(view):
            n = f.readinto(view[done:])
            if not n:
                return None
            done += n
    return out


def with_digest(header: UpdateHeader, body: np.ndarray | bytes) -> UpdateHeader:
    """`header`, its digest value computed from `body` if it was left empty."""
    if header.vector.sha256:
        return header
    return replace(header, vector=replace(header.vector, sha256=digests.digest(header.vector.digest, byte_view(body))))


def _write_file(
    path: Path, body: np.ndarray | bytes, free: Path | None = None, hasher: digests.Hasher | None = None
) -> None:
    """Write `body` to `path` (it must not exist) and start its writeback: into a recycled file claimed from `free`
    if there is one (overwritten in place, cut to size), else into a new file; `hasher` sees every block as it
    is written. Durable once the coordinator has fdatasynced it (module docstring)."""
    data = byte_view(body)
    with _DISK:
        _write_locked(path, data, free, hasher)


def _write_locked(path: Path, data: memoryview, free: Path | None, hasher: digests.Hasher | None) -> None:
    fd = _claim(free, path) if free is not None else -1
    if fd < 0:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o640)
    try:
        size = len(data)
        for start in range(0, size, WRITE_BLOCK):
            block = data[start : start + WRITE_BLOCK]
            if hasher is not None:
                hasher.update(block)
            done = 0
            while done < len(block):
                done += os.pwrite(fd, block[done:], start + done)
        os.ftruncate(fd, size)
        # its writeback started, not waited for (the coordinator fdatasyncs it before it answers; module docstring):
        if not start_writeback(fd):  # where sync_file_range is missing
            os.fdatasync(fd)
    finally:
        os.close(fd)


def _claim(free: Path, path: Path) -> int:
    """Rename one of the coordinator's recycled files (coordinator.local_vectors.recycle) to `path` and open it
    for writing; -1 if none could be claimed (another device may take the same one first: then the next)."""
    try:
        names = os.listdir(free)
    except OSError:
        return -1
    for name in names:
        try:
            os.rename(free / name, path)
        except OSError:
            continue
        try:
            fd = os.open(path, os.O_WRONLY | _NOFOLLOW)
        except OSError:
            path.unlink(missing_ok=True)
            continue
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            return fd
        os.close(fd)
        path.unlink(missing_ok=True)
    return -1


__all__ = ["LocalVectors", "with_digest"]
