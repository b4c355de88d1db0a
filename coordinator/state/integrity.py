"""Every state-dir file is checked against the hash the database (or its `model.json`) recorded,
whenever it is read or something is re-derived from it, so a restart never serves or exports a
silently wrong model.

| file | recorded in | checked when |
| --- | --- | --- |
| `vectors/round-000N.f32` | `rounds.vector_sha256` of round N-1 (`meta.initial_vector_sha256` for N=1) | recovery, re-export, a download of an older round |
| `spool/round-000N/<client>.f32` (bytes as received, in their codec) | `submissions.sha256` (hex; `blake3:<hex>` for a BLAKE3 update, protocol 1.3) | replay after a restart |
| `models/round-000N/model.onnx` | `model_sha256` in its `model.json` (whose `vector_sha256` must match the round's row) | recovery (else re-exported), `status` |
| `models/round-000N/model.onnx.data` (external data: a hard link to the committed vector) | `model_data_sha256` in its `model.json` | recovery (else re-exported), `status` |

A mismatch is a `CorruptStateError` naming the file, the hash it has and the hash expected.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from fedort.common import digests
from fedort.common.errors import CorruptStateError, VectorError
from fedort.coordinator.state.store import read_vector


def sha256_hex(vector: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(vector).data.cast("B")).hexdigest()


def read_verified_vector(path: Path, length: int, expected_sha256: str | None) -> np.ndarray:
    """The float32 vector in `path`, after checking its length and sha256; CorruptStateError naming the file if not."""
    if expected_sha256 is None:
        raise CorruptStateError(f"state dir is corrupt: no sha256 is recorded for {path}")
    try:
        vector = read_vector(path, length)
    except FileNotFoundError:
        raise CorruptStateError(f"state dir is corrupt: {path} is missing") from None
    except VectorError as e:
        raise CorruptStateError(f"state dir is corrupt: {e}") from None
    actual = sha256_hex(vector)
    if actual != expected_sha256:
        raise CorruptStateError(
            f"state dir is corrupt: {path} hashes to {actual[:16]}…, the database recorded {expected_sha256[:16]}…"
        )
    return vector


def read_verified_bytes(path: Path, expected_sha256: str) -> np.ndarray:
    """The bytes of `path` (uint8), after checking their recorded digest (sha256 hex, or "blake3:<hex>" for an
    update that arrived with a BLAKE3 digest, protos.digests); CorruptStateError naming the file if not."""
    try:
        payload = np.fromfile(path, dtype=np.uint8)
    except FileNotFoundError:
        raise CorruptStateError(f"state dir is corrupt: {path} is missing") from None
    algorithm, expected_sha256 = digests.parse_stored(expected_sha256)
    actual = digests.digest(algorithm, payload.data).hex()
    if actual != expected_sha256:
        raise CorruptStateError(
            f"state dir is corrupt: {path} hashes to {actual[:16]}…, the database recorded {expected_sha256[:16]}…"
        )
    return payload


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def export_problem(model_dir: Path, vector_sha256: str | None = None) -> str | None:
    """Why the export in `model_dir` cannot be trusted (None when model.onnx, and its external data file if it
    has one, match its model.json).

    With `vector_sha256`, the record must also name that global vector (the round's committed one).
    """
    record_path, model_path = model_dir / "model.json", model_dir / "model.onnx"
    try:
        record = json.loads(record_path.read_text())
        expected = record["model_sha256"]
    except FileNotFoundError:
        return f"{record_path} is missing"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{record_path} is unreadable ({type(e).__name__})"
    if vector_sha256 is not None and record.get("vector_sha256") != vector_sha256:
        return (
            f"{record_path} names global vector {str(record.get('vector_sha256'))[:16]}…, the database "
            f"recorded {vector_sha256[:16]}…"
        )
    files = [(model_path, expected)]
    if record.get("model_data"):  # external data (coordinator.export_external): the file model.onnx names
        files.append((model_dir / str(record["model_data"]), record.get("model_data_sha256")))
    for path, want in files:
        if not path.is_file():
            return f"{path} is missing"
        actual = _cached_file_sha256(path)
        if actual != want:
            return f"{path} hashes to {actual[:16]}…, its model.json recorded {str(want)[:16]}…"
    return None


_HASHES: dict[tuple[str, int, int, int], str] = {}


def _cached_file_sha256(path: Path) -> str:
    """sha256 of a file, remembered by (path, size, mtime, inode): Status asks often, models rarely change."""
    st = os.stat(path)
    key = (os.fspath(path), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _HASHES:
        if len(_HASHES) > 256:
            _HASHES.clear()
        _HASHES[key] = file_sha256(path)
    return _HASHES[key]


__all__ = ["export_problem", "file_sha256", "read_verified_bytes", "read_verified_vector", "sha256_hex"]
