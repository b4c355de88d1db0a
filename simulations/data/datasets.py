"""Data sets for simulations: the bundled digits set, and a user's own folder of per-client files.

Arrays follow the project's data convention: a dict of named numpy arrays whose names are the
model's inputs (`x` float32 [N, 64], `labels` int64 [N] for digits), all with the same first
dimension. Digits comes from scikit-learn's copy that ships inside the wheel, so nothing is
downloaded at run time.

A data folder (what `fedort data digits` writes, or what a user prepares) holds
`client-0000.npz`, `client-0001.npz`, ... and `test.npz`, each with the same array names; every
file is read by the one client-data reader, `edge_client.client_data.read_npz`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedort.common.cache_root import cache_root
from fedort.common.client_data import Arrays, read_npz
from fedort.common.errors import ConfigError, DataError

CLIENT_FILE = re.compile(r"^client-(\d+)\.npz$")
TEST_FILE = "test.npz"
DEFAULT_NAMES = ("x", "labels")


def client_file_name(index: int) -> str:
    """`client-0007.npz` for index 7 (wider when there are more than 10,000 clients)."""
    return f"client-{index:04d}.npz"


def load_digits_split(test_fraction: float = 0.2, seed: int = 0) -> tuple[Arrays, Arrays]:
    """(train, test) from scikit-learn's digits: x = pixels/16 as float32 [N, 64], labels int64.

    The split is stratified by label and fixed by `seed`, so every client partition drawn from
    `train` is evaluated against the same, class-balanced `test`.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ConfigError(f"test fraction must be in (0, 1), got {test_fraction}")
    cache = _split_cache(test_fraction, seed)
    try:
        with np.load(cache) as z:
            return ({"x": z["train_x"], "labels": z["train_labels"]}, {"x": z["test_x"], "labels": z["test_labels"]})
    except (OSError, KeyError, ValueError):
        pass
    train, test = _digits_split(test_fraction, seed)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            np.savez(f, train_x=train["x"], train_labels=train["labels"], test_x=test["x"], test_labels=test["labels"])
        os.replace(tmp, cache)
    except OSError:
        pass  # no writable cache: the next run computes the split again
    return train, test


def _split_cache(test_fraction: float, seed: int) -> Path:
    """Where the split is cached: importing scikit-learn is slow, the split is fixed by its inputs."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        sk = version("scikit-learn")
    except PackageNotFoundError:
        sk = "none"
    return cache_root() / f"digits-split-{test_fraction!r}-{seed}-sklearn{sk}.npz"


def _digits_split(test_fraction: float, seed: int) -> tuple[Arrays, Arrays]:
    from sklearn.datasets import load_digits  # optional extra `sim`; imported only here
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = (np.asarray(bunch.data, dtype=np.float32) / np.float32(16.0)).reshape(-1, 64)
    labels = np.asarray(bunch.target, dtype=np.int64)
    train_idx, test_idx = train_test_split(
        np.arange(len(labels)), test_size=test_fraction, random_state=seed, stratify=labels
    )
    train_idx.sort()
    test_idx.sort()
    return ({"x": x[train_idx], "labels": labels[train_idx]}, {"x": x[test_idx], "labels": labels[test_idx]})


def subset(arrays: Arrays, indices: np.ndarray) -> Arrays:
    """The rows `indices` of every array (a client's share of a data set)."""
    return {name: a[indices] for name, a in arrays.items()}


def save_npz(path: str | Path, arrays: Arrays) -> Path:
    """Write `arrays` to `path` (uncompressed .npz, so loading is a plain read)."""
    path = Path(path)
    # numpy's stub checks **kwds against allow_pickle too
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


@dataclass(frozen=True)
class DataFolder:
    """A folder of per-client data files plus a shared test set, loaded into memory."""

    root: Path
    clients: list[Arrays]
    client_files: list[Path]
    test: Arrays

    @property
    def sizes(self) -> list[int]:
        """Examples per client, in client order."""
        return [_rows(c) for c in self.clients]


def load_npz_folder(directory: str | Path, names: Sequence[str] | None = DEFAULT_NAMES) -> DataFolder:
    """Load `client-XXXX.npz` (in index order) and `test.npz` from `directory`.

    Every file must hold the same array names with matching trailing shapes and dtypes, so a
    run fails here, with the file named, instead of inside a training step of client 731.
    """
    root = Path(directory)
    if not root.is_dir():
        raise DataError(f"data folder {root} does not exist or is not a directory")
    numbered = []
    for p in root.iterdir():
        m = CLIENT_FILE.match(p.name)
        if m:
            numbered.append((int(m.group(1)), p))
    if not numbered:
        raise DataError(
            f"data folder {root} has no client files; expected client-0000.npz, "
            f"client-0001.npz, ... (one per client) and {TEST_FILE}"
        )
    numbered.sort()
    indices = [i for i, _ in numbered]
    if indices != list(range(len(numbered))):
        gap = next(i for i, j in enumerate(indices) if i != j)
        raise DataError(
            f"client files in {root} must be numbered 0..{len(numbered) - 1} without gaps; "
            f"client {gap} is missing (found {client_file_name(indices[gap])})"
        )
    test_path = root / TEST_FILE
    if not test_path.is_file():
        raise DataError(f"data folder {root} has {len(numbered)} client files but no {TEST_FILE}")

    files = [p for _, p in numbered]
    clients = [read_npz(p, names) for p in files]
    test = read_npz(test_path, names)
    reference = _signature(clients[0])
    for path, arrays in zip(files[1:] + [test_path], clients[1:] + [test]):
        sig = _signature(arrays)
        if sig != reference:
            raise DataError(
                f"{path} does not match {files[0].name}: expected arrays {_describe(reference)}, found {_describe(sig)}"
            )
    for path, arrays in zip(files, clients):
        if _rows(arrays) == 0:
            raise DataError(f"{path} holds no examples; every client needs at least one")
    return DataFolder(root=root, clients=clients, client_files=files, test=test)


def _rows(arrays: Arrays) -> int:
    return len(next(iter(arrays.values())))


def _signature(arrays: Arrays) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {name: (a.dtype.str, a.shape[1:]) for name, a in sorted(arrays.items())}


def _describe(sig: dict[str, tuple[str, tuple[int, ...]]]) -> str:
    return ", ".join(f"{n}: {np.dtype(d).name}[N{''.join(f',{s}' for s in shape)}]" for n, (d, shape) in sig.items())


__all__ = [
    "Arrays",
    "DataFolder",
    "load_digits_split",
    "load_npz_folder",
    "save_npz",
    "subset",
    "client_file_name",
    "CLIENT_FILE",
    "TEST_FILE",
]
