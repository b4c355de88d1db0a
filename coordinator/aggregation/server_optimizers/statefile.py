"""One file holding a server optimizer's state, written atomically and checked when read back.

The file is an uncompressed `.npz` (a zip of `.npy` arrays, CRC-checked on read, loaded without
pickle) with a `meta` entry — JSON: format name, `FORMAT_VERSION`, the optimizer's canonical spec,
the vector length, the step — and one float32 array per moment. It is written with
`fedort.common.durable.atomic_write` (temp + fsync + rename + directory fsync), so a crash leaves the
old file or the new one. Loading refuses, naming the file, a file of another format or version,
of another spec, or of another vector length or step than the caller expects.

For crash-resume, the state must advance with the round commit: either one file per committed
round (named by the round's row), or one file checked with `step` = rounds committed, since a
file rewritten just before a crash that prevented the round's commit is one step ahead.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from fedort.common.durable import atomic_write
from fedort.common.errors import ConfigError, VectorError

FORMAT = "fedort-server-optimizer"
FORMAT_VERSION = 1


def pack_state(optimizer) -> dict[str, np.ndarray]:
    """`optimizer.state()` as named arrays: a JSON `meta` entry (format, spec, length, step) and the moments."""
    state = optimizer.state()
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "spec": str(optimizer),
        "length": optimizer.length,
        "step": int(state["step"]),
    }
    arrays = {name: value for name, value in state.items() if isinstance(value, np.ndarray)}
    return {"meta": np.array(json.dumps(meta, sort_keys=True)), **arrays}


def save_state(optimizer, path: Path) -> None:
    """Write `optimizer.state()` to `path` atomically (the file is replaced as a whole or not at all)."""
    buf = io.BytesIO()
    # numpy's stub checks **kwds against allow_pickle too
    np.savez(buf, **pack_state(optimizer))  # type: ignore[arg-type]
    atomic_write(Path(path), buf.getbuffer())


def load_state(optimizer, path: Path, length: int | None = None, step: int | None = None) -> None:
    """Restore `optimizer` from `path`, refusing a file of another spec or (if given) vector length or step."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except FileNotFoundError:
        raise ConfigError(f"{path}: server optimizer state file not found") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ConfigError(f"{path}: unreadable server optimizer state file ({type(e).__name__}: {e})") from None
    unpack_state(optimizer, arrays, str(path), length, step)


def unpack_state(
    optimizer, arrays: Mapping[str, np.ndarray], where: str, length: int | None = None, step: int | None = None
) -> None:
    """Restore `optimizer` from what `pack_state` returned (read back from `where`), with the same checks."""
    path = where
    if "meta" not in arrays:
        raise ConfigError(f"{path}: not a server optimizer state file (no 'meta' entry)")
    try:
        meta = json.loads(str(arrays["meta"]))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: unreadable server optimizer state file ({type(e).__name__}: {e})") from None
    arrays = {name: arrays[name] for name in sorted(set(arrays) - {"meta"})}
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else meta
        raise ConfigError(f"{path}: not a server optimizer state file (format {found!r}, expected {FORMAT!r})")
    if meta.get("version") != FORMAT_VERSION:
        raise ConfigError(
            f"{path}: server optimizer state format version {meta.get('version')!r}, this fedort reads "
            f"version {FORMAT_VERSION}"
        )
    if meta.get("spec") != str(optimizer):
        raise ConfigError(
            f"{path} holds the state of server optimizer {meta.get('spec')!r}, but this run uses "
            f"{str(optimizer)!r}; restart with the same --server-optimizer or remove the file"
        )
    stored = meta.get("length")
    for name, array in arrays.items():
        if stored is None or array.shape != (stored,):
            raise ConfigError(f"{path}: moment {name!r} has shape {array.shape}, the file says length {stored!r}")
    if length is not None and stored is not None and stored != length:
        raise VectorError(
            f"{path} holds server optimizer state for vectors of {stored} elements, this run's vector has {length}"
        )
    if step is not None and meta.get("step") != step:
        raise ConfigError(
            f"{path} holds server optimizer state after step {meta.get('step')!r}, expected step {step} "
            "(the committed rounds); a state saved for a round that did not commit must not be reused"
        )
    try:
        optimizer.load_state({"step": meta.get("step"), **arrays})
    except (ConfigError, VectorError) as e:
        raise type(e)(f"{path}: {e}") from None
    if length is not None and optimizer.length is None:
        optimizer.length = int(length)
