"""The device's on-disk cache: artifacts by content, global vectors by digest, client identity.

Layout under the cache directory (default: `default_cache_dir()`):

    blobs/sha256/<hex>          artifact files, named by their sha256 (content-addressed)
    models/<model_id>/          the four artifact files (hard links to the blobs) + manifest.json,
                                the folder `TrainingSession.from_artifacts` opens
    vectors/<hex>.f32           global vectors (raw little-endian float32) by sha256; the newest few
    identity/<key>.json         client id (and last manifest) per coordinator address + device name
                                (+ data file); <key>.lock is held while a client runs

Everything is verified on use: a blob whose bytes no longer hash to its name is deleted and
fetched again; a vector file is trusted only if it hashes to the digest the Task announced.
Every write is atomic (temp file in the same folder, fsync, rename), so a crash or a full disk
never leaves a half-written file under a final name.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from fedort.common.cache_root import cache_root
from fedort.common.durable import atomic_write
from fedort.common.errors import ArtifactError, ConfigError
from fedort.common.file_lock import lock_nonblocking
from fedort.edge_client.transport.grpc_transport import ArtifactRef
from fedort.ort.artifacts import MANIFEST, sha256_file

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def default_cache_dir() -> Path:
    """$FEDORT_CACHE_DIR, else the platform's user cache folder + /fedort (`fedort.common.cache_root`)."""
    return cache_root()


def identity_key(address: str, name: str, data: str = "") -> str:
    """A file-name-safe key for one (coordinator address, device name[, data file]) identity.

    The data file takes part so that several clients tried out on one machine (same host name,
    same cache folder, one data file each) get one identity each without extra flags.
    """
    raw = f"{address}|{name}" + (f"|{data}" if data else "")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{address}|{name}")[:80]
    return f"{safe}-{hashlib.sha256(raw.encode()).hexdigest()[:12]}"


class ArtifactCache:
    """Content-addressed artifact and vector store in one folder (see the module docstring).

    Safe to share between the virtual clients of one process (one lock guards the memo of the
    latest vector, which saves the 100 clients of a simulated round 100 reads of the same file).
    """

    def __init__(self, root: str | os.PathLike | None = None, *, keep_vectors: int = 3) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()
        self.keep_vectors = keep_vectors
        self._lock = threading.Lock()
        self._memo: tuple[bytes, np.ndarray] | None = None

    # ---- artifacts --------------------------------------------------------------------------

    def blob_path(self, sha256_hex: str) -> Path:
        if not _HEX64.match(sha256_hex):
            raise ArtifactError(f"artifact digest must be 64 hex characters, got {sha256_hex!r}")
        return self.root / "blobs" / "sha256" / sha256_hex

    def has_blob(self, sha256_hex: str) -> bool:
        """True if the blob is present and its bytes hash to its name; a corrupt blob is removed."""
        path = self.blob_path(sha256_hex)
        if not path.is_file():
            return False
        if sha256_file(path) == sha256_hex:
            return True
        path.unlink(missing_ok=True)
        return False

    def put_blob(self, sha256_hex: str, chunks: Iterable[bytes], size: int | None = None) -> Path:
        """Store streamed bytes under their digest, checking digest (and size) before the rename."""
        path = self.blob_path(sha256_hex)
        h = hashlib.sha256()
        received = 0

        def hashed() -> Iterable[bytes]:
            nonlocal received
            for c in chunks:
                received += len(c)
                if size is not None and received > size:  # stop at the announced size, not at the disk's end
                    raise ArtifactError(
                        f"artifact {sha256_hex[:12]}… was announced as {size} bytes, but the "
                        f"stream sent more ({received} bytes so far); download stopped"
                    )
                h.update(c)
                yield c
            if size is not None and received != size:
                raise ArtifactError(f"artifact {sha256_hex[:12]}… should be {size} bytes, received {received}")
            if h.hexdigest() != sha256_hex:
                raise ArtifactError(f"downloaded artifact hashes to {h.hexdigest()[:12]}…, expected {sha256_hex[:12]}…")

        atomic_write(path, hashed())
        return path

    def model_folder(
        self,
        model_id: str,
        manifest_json: str,
        artifacts: Sequence[ArtifactRef],
        fetch: Callable[[ArtifactRef], Iterable[bytes]],
    ) -> Path:
        """The verified artifacts folder of `model_id`, fetching any missing or corrupt file.

        `fetch(ref)` yields the bytes of one artifact (the client downloads it from the
        coordinator). Returns a folder `TrainingSession.from_artifacts` can open.
        """
        if not re.match(r"^[A-Za-z0-9._-]{1,128}$", model_id):
            raise ArtifactError(f"model id must be a plain name, got {model_id!r}")
        folder = self.root / "models" / model_id
        folder.mkdir(parents=True, exist_ok=True)
        for ref in artifacts:
            if "/" in ref.name or "\\" in ref.name or ref.name in ("", ".", "..", MANIFEST):
                raise ArtifactError(f"artifact name must be a plain file name, got {ref.name!r}")
            if not self.has_blob(ref.sha256):
                self.put_blob(ref.sha256, fetch(ref), ref.size)
            self._link(self.blob_path(ref.sha256), folder / ref.name)
        manifest_path = folder / MANIFEST
        if not manifest_path.is_file() or manifest_path.read_text() != manifest_json:
            atomic_write(manifest_path, [manifest_json.encode()])
        return folder

    @staticmethod
    def _link(blob: Path, target: Path) -> None:
        """Make `target` name the blob's bytes (a hard link, or a copy where links are not allowed)."""
        try:
            if target.exists() and os.path.samefile(blob, target):
                return
        except OSError:
            pass
        tmp = target.with_name(f".{target.name}.link-{os.getpid()}-{threading.get_ident()}")
        tmp.unlink(missing_ok=True)
        try:
            os.link(blob, tmp)
        except OSError:
            with open(blob, "rb") as src:
                atomic_write(tmp, iter(lambda: src.read(1 << 20), b""))
        os.replace(tmp, target)

    # ---- global vectors ---------------------------------------------------------------------

    def vector_path(self, sha256: bytes) -> Path:
        return self.root / "vectors" / f"{sha256.hex()}.f32"

    def get_vector(self, sha256: bytes, length: int | None = None) -> np.ndarray | None:
        """The cached vector with this digest, or None if absent or no longer matching."""
        if len(sha256) != 32:
            return None
        with self._lock:
            if self._memo is not None and self._memo[0] == sha256:
                return self._memo[1]
        path = self.vector_path(sha256)
        if not path.is_file():
            return None
        data = path.read_bytes()
        if hashlib.sha256(data).digest() != sha256 or (length is not None and len(data) != 4 * length):
            path.unlink(missing_ok=True)
            return None
        vector = np.frombuffer(data, dtype="<f4")
        vector.flags.writeable = False
        with self._lock:
            self._memo = (sha256, vector)
        return vector

    def latest_vector(self) -> tuple[bytes, np.ndarray] | None:
        """The (digest, vector) this cache object stored or read last (what a download delta can build on)."""
        with self._lock:
            return self._memo

    def put_vector(self, sha256: bytes, vector: np.ndarray, *, persist: bool = True) -> None:
        """Keep `vector` (already verified against `sha256`) for later rounds and clients.

        The cache keeps the array itself, without a copy, and marks it read-only; `persist=False`
        keeps it in memory only (a vector the device can read again from where it came). The file is
        written atomically but not fsynced: `get_vector` checks its sha256, so one a power cut lost or
        tore is simply fetched again (and the round's first training does not wait for the disk).
        """
        vector = np.ascontiguousarray(vector, dtype="<f4")
        if persist:
            atomic_write(self.vector_path(sha256), [vector.data.cast("B")], durable=False)
        vector.flags.writeable = False
        with self._lock:
            self._memo = (sha256, vector)
        if persist:
            self._prune_vectors()

    def _prune_vectors(self) -> None:
        files = sorted((self.root / "vectors").glob("*.f32"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in files[self.keep_vectors :]:
            old.unlink(missing_ok=True)

    # ---- identity ---------------------------------------------------------------------------

    def _identity_path(self, key: str) -> Path:
        return self.root / "identity" / f"{key}.json"

    def load_identity(self, key: str) -> dict:
        """What was saved for this coordinator + device name ({} if nothing or unreadable)."""
        path = self._identity_path(key)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def lock_identity(self, key: str) -> IdentityLock:
        """Hold this identity for the life of one client process (ConfigError if another holds it)."""
        return IdentityLock(self.root / "identity" / f"{key}.lock")

    def save_identity(self, key: str, **values) -> None:
        data = {**self.load_identity(key), **values}
        atomic_write(self._identity_path(key), [json.dumps(data, indent=2, sort_keys=True).encode()])


class IdentityLock:
    """An exclusive, non-blocking lock on one saved identity (released on `release()` or process exit).

    Two clients on one machine with the same cache folder and device name would otherwise join as
    the same client id and take each other's tasks. The kernel drops the lock when the process
    dies, even by SIGKILL, so a crashed client never leaves it behind.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "a+")
        try:
            lock_nonblocking(self._file)
        except OSError:
            self._file.close()
            raise ConfigError(
                f"another edge client is running with the same identity (lock {path}); give each client on "
                f"this machine its own --name or --cache-dir"
            ) from None

    def release(self) -> None:
        if not self._file.closed:
            self._file.close()  # closing the descriptor releases the lock


__all__ = ["ArtifactCache", "IdentityLock", "default_cache_dir", "identity_key"]
