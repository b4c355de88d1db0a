"""The co-located vector path: devices on the coordinator's host hand vectors over as files, not streams.

Opt-in (`local_vector_dir`, `fedort coordinator serve --local-vector-dir DIR`; `fedort simulate`
turns it on with STATE/local-vectors), so a deployed coordinator never opens a file a client
names. The JoinReply announces the directory; the streams stay as they are for everyone else,
and a device that cannot use the directory streams (edge_client/uploads/local_vectors.py).

Upload (`local_file_received`, the upload path's hook): the UpdateHeader names a file in the
directory (`local_file`) and no chunks follow. It is accepted only if

    the name is plain: "<client_id>." + letters, digits, '.', '_', '-', ending ".f32" (no path)
    lstat: a regular file (not a symlink, directory, fifo, device) of exactly payload_bytes
    -> renamed to the update's spool temp name (the device can no longer swap what the name points to)
    -> opened O_NOFOLLOW, fstat again: regular, one link, same size
    -> read once: sha256 = the header's, the codec's streaming decode gives finite values (the checks
       a streamed upload gets; a header whose digest value is empty, protocol 1.6, gets the digest of the
       bytes read recorded instead: `JoinReply.hashes_local_files`, below) -> the usual rename into place
       + row, after an fdatasync of the file by whoever places it (the device only started its writeback,
       edge_client/uploads/local_vectors.py, and the sync can wait behind other devices' writeback, so it is not
       done here in the fold thread: the round engine's group commit thread does it before the rename,
       `Arrival.sync`; the async engine when it places the file)

With `fold` (a raw update for a streaming combiner without transforms: `uploads`), the read also
folds: each 1 MiB step is read and hashed (`read_ahead`: a thread of its own, a few steps ahead), then
checked finite and folded into the round's sum while in cache, so the 20 MB come from the page cache
once, not once here and again in the fold. That fold runs in
the fold thread before the digest is known; an update that then fails (digest, values) or is never
counted leaves the aggregator `stale`, and the round's close refolds the counted updates from
their durable copies (`RoundAggregator.rebuild`): what is acknowledged is still exactly what is summed.

Who hashes (protocol 1.6): the update's digest names it in its row and in a resend (coordinator/engine/resubmission.py).
Hashing it on both sides would cost two BLAKE3 passes over each update, so a
device may leave the digest value of its first attempt empty and the coordinator records the digest of the
bytes it read and folded (it hashes them anyway); a resend carries the digest, as a streamed update always
does. The recorded digest is then always the coordinator's own reading of the spooled bytes.

Anything else is INVALID_ARGUMENT with the reason and changes nothing, except that a file which
failed after the move (digest, codec, size changed) is deleted. A file whose update is answered
`duplicate` (already counted, in an open or a closed round: coordinator/engine/resubmission.py) is never
taken and is deleted too (`discard`): the coordinator owns what was handed over. The directory must be on the
state dir's filesystem (checked at start) so that the move is a rename: the bytes are written once,
by the device, and the fold memory-maps the spooled file. Trust: the directory is for processes
trusted like the coordinator's own state dir (same host, same user, as in a simulation); a writer
that keeps the file open could still change it after the check.

Recycling (`recycle`): a committed round's spool files are moved into FREE (at most KEEP_FREE files,
KEEP_FREE_BYTES; emptied when the coordinator starts and closes) instead of being deleted, and a device claims one by renaming it to its update's
name and overwrites it in place (edge_client/uploads/local_vectors.py). Overwriting pages the page cache
already holds, on blocks the file already has, costs less than a new file
(no page allocation, no block allocation in the fsync, no unlink freeing its pages later). The
checks above are the same whatever file the device wrote into.

Download (`publish`): each new global vector is hard-linked as global/<sha256 hex>.f32 (the files
in vectors/ are written once and replaced by rename, never changed in place). FIT tasks also carry
the vector's BLAKE3 (`file_digest`, protocol 1.5), so a device checks the file it reads with the faster
digest, against a digest that came over its gRPC channel; the device checks
its length and sha256 against the Task. The two newest stay.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from fedort.common import digests
from fedort.common.errors import ConfigError, ProtocolError, VectorError
from fedort.coordinator.aggregation.decode import DensePiece, check_reconstructed
from fedort.coordinator.colocated.read_ahead import read_ahead
from fedort.coordinator.rpc.client_ids import owns_file
from fedort.coordinator.rpc.join_limits import clip
from fedort.coordinator.uploads.admission import AdmittedUpdate
from fedort.coordinator.uploads.spool_free import empty, move_into
from fedort.coordinator.uploads.stream import spool_error
from fedort.protos.messages import UpdateHeader
from fedort.protos.vector_stream import vector_digest

log = logging.getLogger(__name__)

GLOBAL = "global"  # sub-folder of published global vectors
FREE = ".free"  # committed rounds' spool files that devices may overwrite (recycle)
KEEP_FREE = 32  # at most this many recycled files ...
KEEP_FREE_BYTES = 1 << 30  # ... holding at most this many bytes
KEEP_GLOBALS = 2  # published global vectors kept (the current one and the previous)
READ_STEP = 1 << 20  # bytes read, hashed and decoded per step
_NAME = re.compile(r"[A-Za-z0-9._-]{1,255}")
_GLOBAL_NAME = re.compile(r"[0-9a-f]{64}\.f32")


class LocalVectorDir:
    """The coordinator's side of the directory (see the module docstring)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.globals = self.path / GLOBAL
        self._published: list[Path] = []

    @staticmethod
    def file_digest(vector: np.ndarray) -> bytes:
        """The BLAKE3 FIT tasks carry (Task.vector_blake3: co-located file reads, streamed downloads); empty
        without the `blake3` package."""
        if digests.BLAKE3 not in digests.available():
            return b""
        return vector_digest(np.asarray(vector, dtype="<f4"), digests.BLAKE3)

    @classmethod
    def open(cls, path: str | os.PathLike, state_dir: str | os.PathLike) -> LocalVectorDir:
        """Create the directory if needed; ConfigError unless it shares the state dir's filesystem."""
        path = Path(path).resolve()
        try:
            (path / GLOBAL).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"local_vector_dir {path}: cannot create it ({e.strerror or e})") from None
        if os.stat(path).st_dev != os.stat(state_dir).st_dev:
            raise ConfigError(
                f"local_vector_dir {path} must be on the same filesystem as state_dir {state_dir}: "
                "the coordinator moves a device's file into its spool by renaming it"
            )
        directory = cls(path)
        directory.clear_free()  # an earlier run's recycled files: nothing refers to them
        return directory

    # ---- download ---------------------------------------------------------------------------

    def publish(self, vector_file: Path, sha256: bytes) -> None:
        """Offer the global vector in `vector_file` as global/<sha256 hex>.f32; drop older ones.

        Best effort: if it fails, devices download the vector (logged, never raised)."""
        target = self.globals / f"{sha256.hex()}.f32"
        tmp = self.globals / f".{sha256.hex()}.{os.getpid()}.tmp"
        try:
            tmp.unlink(missing_ok=True)
            os.link(vector_file, tmp)
            os.replace(tmp, target)
            self._published = ([p for p in self._published if p != target] + [target])[-KEEP_GLOBALS:]
            for f in self.globals.iterdir():
                if _GLOBAL_NAME.fullmatch(f.name) and f not in self._published:
                    f.unlink(missing_ok=True)
        except OSError as e:
            log.warning(
                "cannot publish global vector %s… in %s (%s); co-located devices download it instead",
                sha256.hex()[:12],
                self.globals,
                e,
            )

    # ---- recycling --------------------------------------------------------------------------

    def recycle(self, files: list[Path]) -> list[Path]:
        """Move committed spool `files` into FREE while it holds < KEEP_FREE files and KEEP_FREE_BYTES;
        returns the files not moved (the caller deletes them)."""
        return move_into(self.path / FREE, files, KEEP_FREE, KEEP_FREE_BYTES)

    def clear_free(self) -> None:
        """Delete the recycled files (at start and when the coordinator closes: they hold no one's data)."""
        empty(self.path / FREE)

    # ---- upload -----------------------------------------------------------------------------

    def take(self, admitted: AdmittedUpdate, tmp: Path, fold: Fold | None = None) -> bytes:
        """Move the update's file to the spool temp path `tmp` and check it (raises; the caller removes `tmp`);
        with `fold`, a raw update's values are folded as they are checked (see the module docstring).
        Returns the digest of the bytes taken (the header's, or what it left empty: protocol 1.6).
        Not fsynced here: whoever places `tmp` does that first (module docstring)."""
        h = admitted.header
        name, want = h.local_file, admitted.payload_bytes
        if not _plain(h):
            raise VectorError(
                f"local_file must be a plain file name '<client_id>.<name>.f32' (letters, digits, '.', "
                f"'_', '-'; no path) in the coordinator's local vector dir, got {clip(name)!r}"
            )
        what = f"local_file {name!r}"
        src = self.path / name
        try:
            _check_file(os.lstat(src), want, what)
            tmp.parent.mkdir(parents=True, exist_ok=True)
            os.rename(src, tmp)
        except FileNotFoundError:
            raise VectorError(f"{what}: no such file in the coordinator's local vector dir {self.path}") from None
        except OSError as e:
            raise spool_error(e, "move a local update file into the spool") from e
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        try:  # no follow, no wait: it may have been swapped for a symlink or a fifo after the lstat
            fd = os.open(tmp, flags)
        except OSError as e:
            raise VectorError(f"{what} is not a regular file that can be opened ({e.strerror})") from None
        try:
            st = os.fstat(fd)
            _check_file(st, want, what)
            if st.st_nlink != 1:
                raise VectorError(f"{what} has {st.st_nlink} hard links; hand over a file of its own")
            digest = _verify(fd, admitted, what, fold)
        finally:
            os.close(fd)
        log.debug("%s of %s taken into the spool (%d bytes)", what, h.client_id, want)
        return digest

    def discard(self, h: UpdateHeader) -> None:
        """Delete the file `h` handed over if it is still here (answered `duplicate` without being taken: the
        coordinator owns a handed-over file, and a device that crashed would leave it behind); best effort."""
        if not _plain(h):
            return
        try:
            (self.path / h.local_file).unlink(missing_ok=True)
        except OSError as e:
            log.warning("cannot remove local_file %r of %s (%s)", h.local_file, h.client_id, e)


def _plain(h: UpdateHeader) -> bool:
    """`h.local_file` is a plain name of `h.client_id`'s in the directory itself: '<client_id>.<name>.f32', with no
    '.' in <name> (`client_ids.owns_file`: an id that is another's prefix up to a '.' does not own its files)."""
    name = h.local_file
    return bool(_NAME.fullmatch(name)) and owns_file(h.client_id, name)


def _check_file(st: os.stat_result, want: int, what: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise VectorError(f"{what} is a symbolic link; only regular files in the directory itself are accepted")
    if not stat.S_ISREG(st.st_mode):
        raise VectorError(f"{what} is not a regular file")
    if st.st_size != want:
        raise VectorError(f"{what} is {st.st_size} bytes; the header declares a payload of {want} bytes")


def foldable(admitted: AdmittedUpdate) -> bool:
    """Whether `take` can fold this update while checking it: raw float32 values, not a delta."""
    return admitted.base is None and (admitted.header.vector.codec or "raw") == "raw" and admitted.decoder.streams


def _verify(fd: int, admitted: AdmittedUpdate, what: str, fold: Fold | None = None) -> bytes:
    """One pass over the file: its digest and the codec's decode check, as a streamed upload gets them
    (and, with `fold` and a `foldable` update, the fold of each checked block); the digest. The reads and
    the digest run a few steps ahead, in a thread of their own (`read_ahead`)."""
    meta, n = admitted.header.vector, admitted.payload_bytes
    digest = digests.new(meta.digest)  # sha256, or BLAKE3 where announced (admission checked it)
    with read_ahead(fd, n, digest, what, READ_STEP) as parts:
        if fold is not None and foldable(admitted):
            fold(_checked_blocks(parts, admitted))  # raises inside the fold if a check fails
            return _check_digest(digest, admitted, what)
        stream = admitted.decoder.stream(meta.length, n) if admitted.decoder.streams else None
        # raw's stream decoder refuses non-finite values itself; a second pass only matters for codecs and deltas
        again = admitted.base is not None or (meta.codec or "raw") != "raw"
        for part in parts:
            if stream is not None:
                for piece in stream.feed(part):
                    if again:
                        check_reconstructed(piece, admitted.base, what)
    if stream is not None:
        for piece in stream.finish():
            if again:
                check_reconstructed(piece, admitted.base, what)
    value = _check_digest(digest, admitted, what)
    if stream is None:  # a decoder that cannot stream: validate the complete payload once
        payload = np.frombuffer(os.pread(fd, n, 0), dtype=np.uint8)
        values = admitted.decoder.decode(payload, meta.length)
        check_reconstructed(DensePiece(0, np.asarray(values, dtype=np.float32)), admitted.base, what)
    return value


def _checked_blocks(parts: Iterable[memoryview], admitted: AdmittedUpdate) -> Iterator[tuple[int, np.ndarray]]:
    """A raw update's values as (start, float32 block), each block checked finite (the raw stream decoder)
    before it is yielded."""
    stream = admitted.decoder.stream(admitted.header.vector.length, admitted.payload_bytes)
    for part in parts:  # the raw decoder yields dense pieces only
        for piece in stream.feed(part):
            dense = cast(DensePiece, piece)
            yield dense.offset, dense.values
    for piece in stream.finish():
        dense = cast(DensePiece, piece)
        yield dense.offset, dense.values


def _check_digest(digest: digests.Hasher, admitted: AdmittedUpdate, what: str) -> bytes:
    """The digest of the bytes read: the header's, else VectorError; what the header left empty is taken as read."""
    meta, value = admitted.header.vector, digest.digest()
    if meta.sha256 and value != meta.sha256:
        raise VectorError(
            f"vector {meta.digest or 'sha256'} mismatch: header says {meta.sha256.hex()[:16]}…, {what} hashes to "
            f"{digest.hexdigest()[:16]}…"
        )
    return value


@dataclass(frozen=True)
class TakenFile:
    """A co-located device's update, checked at `path` but not fsynced (its placer does that); never kept
    inline in its row. `folded`: its values are already in the round's sum (`take` with a fold).
    `digest`: of the bytes taken (what the row records when the header left it empty, protocol 1.6)."""

    path: Path
    payload: None = None
    folded: bool = False
    digest: bytes = b""


def with_taken_digest(h: UpdateHeader, receiver: object) -> UpdateHeader:
    """`h`, its empty digest value (protocol 1.6) filled with the digest of the bytes a `TakenFile` took."""
    if h.vector.sha256 or not isinstance(receiver, TakenFile):
        return h
    return replace(h, vector=replace(h.vector, sha256=receiver.digest))


Fold = Callable[[Iterator[tuple[int, np.ndarray]]], None]  # folds (start, block) pairs; raises what they raise


class EarlyFold:
    """How `local_file_received` folds while taking: `fold(blocks)` and `run(fn)`, which calls fn in the fold
    thread (the uploads') and returns what it returned; None from `Uploads.early_fold` where the update cannot
    be folded before it counts."""

    def __init__(self, fold: Fold, run: Callable[[Callable[[], Any]], Awaitable[Any]]) -> None:
        self.fold, self.run = fold, run


@asynccontextmanager
async def local_file_received(
    admitted: AdmittedUpdate,
    tmp: Path,
    chunks: AsyncIterator[bytes],
    directory: str | os.PathLike | None,
    early: Callable[[], EarlyFold | None] = lambda: None,
) -> AsyncIterator[TakenFile]:
    """The upload path's hook for a header naming `local_file`: like `uploads.received`, the body runs
    once the update sits checked at `tmp` (not fsynced: the body must, before it acknowledges), and must
    rename it into place to keep it.
    `early()` (asked once the header is alone) may fold the update while it is checked."""
    async for _ in chunks:
        raise ProtocolError("an update that names local_file carries no chunks; send the header alone")
    if directory is None:
        raise ProtocolError(
            "this coordinator takes no local vector files (it runs without local_vector_dir, "
            "--local-vector-dir): stream the update"
        )
    try:
        plan = early() if foldable(admitted) else None
        take = LocalVectorDir(directory).take
        if plan is None:
            digest = await asyncio.to_thread(take, admitted, tmp)
        else:
            digest = await plan.run(lambda: take(admitted, tmp, plan.fold))
        yield TakenFile(tmp, folded=plan is not None, digest=digest)
    finally:
        if os.path.lexists(tmp):  # usually placed (renamed) by now: unlink would wait, on the event loop, for the
            tmp.unlink(missing_ok=True)  # folder's lock while the group commit renames into it and fsyncs it


__all__ = ["EarlyFold", "LocalVectorDir", "TakenFile", "foldable", "local_file_received", "with_taken_digest"]
