"""Built-in models' training artifacts, built once per machine and reused by every run.

Building the artifacts of a built-in model costs a run part of its start-up (importing
`onnx` and ORT's artifact generator, building the graph, opening it once to read its names),
and the result is fixed by its inputs: the model, its seed, the optimizer, the loss, the
versions of onnx / ONNX Runtime / numpy and the source of fedort's builder. Those inputs name a
cache entry in the simulation cache (beside the digits split); an entry is a complete artifacts
folder, checked against its manifest (every file's sha256, the manifest's own model id) each
time it is used, rebuilt when the check fails, and published with one atomic rename, so
concurrent runs never see half an entry. The run still gets its own copy in OUT/artifacts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from pathlib import Path

from fedort.common.cache_root import cache_root
from fedort.common.errors import ArtifactError
from fedort.ort.artifacts import Manifest, copy_artifacts

log = logging.getLogger("fedort.sim")

KEY_FILE = "key.json"
LOSS = "cross-entropy"  # the built-in models' loss (build_artifacts' default)
# fedort modules whose code decides the bytes of a built-in model's artifacts
_BUILDER_SOURCES = ("fedort/ort/models.py", "fedort/ort/artifacts.py", "fedort/ort/_training_api.py")
_DISTRIBUTIONS = {
    "onnx": ("onnx",),
    "onnxruntime": ("onnxruntime-training-cpu", "onnxruntime-training", "onnxruntime"),
    "numpy": ("numpy",),
}


def artifacts_key(model: str, seed: int, optimizer: str) -> dict:
    """Everything that determines a built-in model's artifacts (the cache entry is named by its hash)."""
    import fedort.edge_client

    package = Path(fedort.edge_client.__file__).resolve().parent
    sources = hashlib.sha256()
    for rel in _BUILDER_SOURCES:
        sources.update(rel.encode() + b"\0" + (package.parent / rel).read_bytes() + b"\0")
    return {
        "model": model,
        "seed": int(seed),
        "optimizer": optimizer,
        "loss": LOSS,
        "versions": {name: _version(dists) for name, dists in _DISTRIBUTIONS.items()},
        "builder_sha256": sources.hexdigest(),
    }


def _version(distributions: tuple[str, ...]) -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in distributions:
        try:
            return f"{dist}=={version(dist)}"
        except PackageNotFoundError:
            continue
    return "none"


def entry_dir(key: dict, root: Path | None = None) -> Path:
    blob = json.dumps(key, sort_keys=True, separators=(",", ":")).encode()
    return (root or cache_root()) / "artifacts" / hashlib.sha256(blob).hexdigest()[:32]


def cached_builtin_artifacts(model: str, seed: int, optimizer: str, out: Path, *, root: Path | None = None) -> Manifest:
    """The artifacts of built-in `model` in `out` (created): copied from a verified cache entry,
    or built (and then cached). Same bytes and model id either way."""
    key = artifacts_key(model, seed, optimizer)
    entry = entry_dir(key, root)
    manifest = _checked(entry, key)
    if manifest is None:
        manifest = _build_entry(entry, key)
    if manifest is None:  # no writable cache: build in place, as without one
        return _build(model, seed, optimizer, out)
    try:
        copied = copy_artifacts(entry, out)  # verifies the entry's files again as it copies them
    except (OSError, ArtifactError) as e:  # another run discarded or replaced the entry meanwhile
        log.info("artifact cache entry %s changed while it was copied (%s): building in the run folder", entry, e)
        return _build(model, seed, optimizer, out)
    return copied


def _checked(entry: Path, key: dict) -> Manifest | None:
    """The entry's manifest if the entry is complete, for `key`, and every file matches; else None
    (a corrupt entry is moved aside and deleted, so it is rebuilt)."""
    if not entry.is_dir():
        return None
    from fedort.ort.artifacts import verify_artifacts

    try:
        if json.loads((entry / KEY_FILE).read_text()) != key:
            raise ArtifactError("its key.json names other inputs")
        return verify_artifacts(entry)
    except (OSError, ValueError, ArtifactError) as e:
        log.warning("artifact cache entry %s is unusable (%s); building it again", entry, e)
        _discard(entry)
        return None


def _build_entry(entry: Path, key: dict) -> Manifest | None:
    """Build into a private folder beside the entry, then publish it with one rename; None if the
    cache cannot be written. A concurrent run that published first wins (same bytes)."""
    tmp = entry.parent / f".build-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir(parents=True)
    except OSError as e:
        log.info("no artifact cache at %s (%s): building in the run folder", entry.parent, e)
        return None
    try:
        manifest = _build(key["model"], key["seed"], key["optimizer"], tmp)
        (tmp / KEY_FILE).write_text(json.dumps(key, indent=2, sort_keys=True))
        _fsync_folder(tmp)
        try:
            os.rename(tmp, entry)
        except OSError:  # another run published this entry meanwhile
            if _checked(entry, key) is None:
                raise
        return manifest
    except OSError as e:
        log.info("could not write the artifact cache entry %s (%s): building in the run folder", entry, e)
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _build(model: str, seed: int, optimizer: str, out: Path) -> Manifest:
    from fedort.ort.artifacts import build_artifacts
    from fedort.ort.models import builtin_model

    return build_artifacts(builtin_model(model, seed=seed), out, optimizer=optimizer, loss=LOSS)


def _fsync_folder(folder: Path) -> None:
    from fedort.common.durable import fsync_dir, fsync_file

    for name in os.listdir(folder):
        fsync_file(folder / name)
    fsync_dir(folder)


def _discard(entry: Path) -> None:
    trash = entry.parent / f".trash-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(entry, trash)
    except OSError:
        return  # gone already (another run discarded it)
    shutil.rmtree(trash, ignore_errors=True)
