"""Turn the data forms the Trainer accepts into batches of arrays in the model's input order.

Three forms are accepted:

* a dict ``name -> array`` (one row per example, names = the model's inputs),
* a path to a ``.npz`` file with arrays named after the inputs; a ``val_`` prefixed copy of the
  names (``val_x``, ``val_labels``) is an optional validation split,
* an iterable of batches, each a tuple/list of arrays in input order or a dict by name.

Arrays are checked once, up front, against the model's input specs (names, dtypes, trailing
shapes), so a mistake fails with a `DataError` that names what was expected and what arrived,
instead of deep inside ONNX Runtime on step 731.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence, Union

import numpy as np

from fedort.protos.errors import ConfigError, DataError
from fedort.edge_client.artifacts import TensorSpec

Batch = tuple[np.ndarray, ...]
DataLike = Union[Mapping[str, np.ndarray], str, os.PathLike, Iterable]

VAL_PREFIX = "val_"


def describe_spec(spec: TensorSpec) -> str:
    """`float32[?, 64]` for a spec."""
    return f"{spec.dtype}[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]"


def describe_array(a: np.ndarray) -> str:
    return f"{a.dtype.name}[" + ", ".join(str(d) for d in a.shape) + "]"


def check_array(name: str, a: np.ndarray, spec: TensorSpec | None, what: str) -> None:
    """Raise DataError unless `a` has the dtype and shape `spec` declares (the batch dim is free)."""
    if spec is None:
        return
    if a.dtype.name != spec.dtype:
        hint = f" (convert with .astype(np.{spec.dtype}))" if spec.dtype in np.sctypeDict else ""
        raise DataError(f"{what}: input {name!r} must be {describe_spec(spec)}, got {describe_array(a)}{hint}")
    if a.ndim != len(spec.shape) or any(d is not None and d != v for d, v in zip(spec.shape[1:], a.shape[1:])):
        raise DataError(f"{what}: input {name!r} must have shape {describe_spec(spec)}, got {describe_array(a)}")


def load_npz(path: str | os.PathLike, names: Sequence[str], prefix: str = "") -> dict[str, np.ndarray] | None:
    """The arrays `prefix + name` for each input name from a .npz file, keyed by input name.

    Returns None when `prefix` is given and none of the prefixed arrays are in the file (no such
    split); a partial split or missing plain arrays is a DataError.
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as f:
            found = list(f.files)
            wanted = [prefix + n for n in names]
            present = [w for w in wanted if w in found]
            if prefix and not present:
                return None
            if len(present) != len(wanted):
                missing = [w for w in wanted if w not in found]
                raise DataError(f"{path} lacks array(s) {missing}; expected {wanted}, found {sorted(found)}")
            return {n: f[prefix + n] for n in names}
    except FileNotFoundError:
        raise DataError(f"data file not found: {path}") from None
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise DataError(f"{path} is not a readable .npz file of numpy arrays: {e}") from None


def is_path(data: object) -> bool:
    """True for the forms that name a .npz file (str or os.PathLike)."""
    return isinstance(data, (str, os.PathLike))


@dataclass
class ArrayData:
    """Validated arrays in input order, all with the same number of rows."""

    arrays: Batch

    def __len__(self) -> int:
        return int(self.arrays[0].shape[0])

    def num_batches(self, batch_size: int) -> int:
        return -(-len(self) // batch_size)

    def batches(self, batch_size: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        """Batches of `batch_size` rows (the last may be smaller), shuffled when `rng` is given.

        Shuffling permutes the arrays once per epoch and then yields views, which costs less
        than gathering every batch with fancy indexing.
        """
        arrays = self.arrays
        n = len(self)
        if rng is not None:
            perm = rng.permutation(n)
            arrays = tuple(a[perm] for a in arrays)
        if len(arrays) == 2:  # features + labels, the common case: skip the generic tuple build
            a, b = arrays
            for start in range(0, n, batch_size):
                end = start + batch_size
                yield a[start:end], b[start:end]
            return
        for start in range(0, n, batch_size):
            yield tuple([a[start:start + batch_size] for a in arrays])


@dataclass
class IterableData:
    """Batches the user supplies; checked on the first batch of each pass, then trusted to ORT."""

    source: Iterable
    names: tuple[str, ...]
    specs: Mapping[str, TensorSpec]
    what: str
    extra_ok: bool = False     # batches may carry more arrays than `names` (labels, for predict)
    _passes: int = 0

    def num_batches(self, batch_size: int) -> int | None:
        try:
            return len(self.source)  # type: ignore[arg-type]
        except TypeError:
            return None

    def batches(self, batch_size: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        if self._passes and iter(self.source) is self.source:
            raise DataError(f"{self.what} is a one-shot iterator and was used up by the first epoch; "
                            "pass a list (or another re-iterable) of batches to run several epochs")
        self._passes += 1
        first = True
        for item in self.source:
            batch = _batch_tuple(item, self.names, self.what)
            if self.extra_ok:
                batch = batch[: len(self.names)]
            if first:
                _check_batch(batch, self.names, self.specs, self.what)
                first = False
            yield batch


def _batch_tuple(item: object, names: tuple[str, ...], what: str) -> Batch:
    if isinstance(item, Mapping):
        missing = [n for n in names if n not in item]
        if missing:
            raise DataError(f"{what}: batch lacks {missing}; expected arrays {list(names)}, got {sorted(item)}")
        return tuple(np.asarray(item[n]) for n in names)
    if isinstance(item, (tuple, list)):
        return tuple(np.asarray(a) for a in item)
    raise DataError(f"{what}: each batch must be a tuple of arrays {list(names)} or a dict by name, "
                    f"got {type(item).__name__}")


def _check_batch(batch: Batch, names: tuple[str, ...], specs: Mapping[str, TensorSpec], what: str) -> None:
    if len(batch) != len(names):
        raise DataError(f"{what}: the model takes {len(names)} inputs {list(names)}, a batch has {len(batch)} arrays")
    for name, a in zip(names, batch):
        if a.ndim == 0:
            raise DataError(f"{what}: input {name!r} is a scalar; expected one row per example")
        check_array(name, a, specs.get(name), what)
    _check_rows(dict(zip(names, batch)), what)


def _check_rows(arrays: Mapping[str, np.ndarray], what: str) -> None:
    rows = {n: int(a.shape[0]) for n, a in arrays.items()}
    if len(set(rows.values())) > 1:
        raise DataError(f"{what}: arrays must have the same number of rows, got "
                        + ", ".join(f"{n}={r}" for n, r in rows.items()))


def from_arrays(arrays: Mapping[str, np.ndarray], names: Sequence[str], specs: Mapping[str, TensorSpec],
                what: str) -> ArrayData:
    """Check a dict of arrays against the inputs `names` and put them in input order."""
    missing = [n for n in names if n not in arrays]
    if missing:
        raise DataError(f"{what} lacks array(s) {missing}; the model's inputs are {list(names)}, "
                        f"got {sorted(arrays)}")
    ordered = tuple(np.asarray(arrays[n]) for n in names)
    for name, a in zip(names, ordered):
        if a.ndim == 0:
            raise DataError(f"{what}: input {name!r} is a scalar; expected one row per example")
        check_array(name, a, specs.get(name), what)
    _check_rows(dict(zip(names, ordered)), what)
    if ordered[0].shape[0] == 0:
        raise DataError(f"{what} holds no examples")
    return ArrayData(tuple(np.ascontiguousarray(a) for a in ordered))


def as_data(data: DataLike, names: Sequence[str], specs: Mapping[str, TensorSpec], what: str,
            prefix: str = "") -> ArrayData | IterableData:
    """Any accepted data form as `ArrayData` (dict, .npz) or `IterableData` (iterable of batches)."""
    names = tuple(names)
    if data is None:
        raise DataError(f"{what}: no data given")
    if is_path(data):
        arrays = load_npz(data, names, prefix)
        if arrays is None:  # no prefixed split: fall back to the plain names
            arrays = load_npz(data, names)
        return from_arrays(arrays, names, specs, f"{what} ({os.fspath(data)})")
    if isinstance(data, Mapping):
        return from_arrays(data, names, specs, what)
    if isinstance(data, np.ndarray):
        raise DataError(f"{what}: got a single array; pass a dict {{{', '.join(repr(n) for n in names)}}} "
                        "of arrays, a .npz path or an iterable of batch tuples")
    if isinstance(data, Iterable):
        return IterableData(data, names, specs, what)
    raise DataError(f"{what}: expected a dict of arrays, a .npz path or an iterable of batches, "
                    f"got {type(data).__name__}")


def npz_validation_split(path: str | os.PathLike, names: Sequence[str], specs: Mapping[str, TensorSpec]
                         ) -> ArrayData | None:
    """The `val_` split of a .npz training file, or None if it has none."""
    arrays = load_npz(path, names, VAL_PREFIX)
    return None if arrays is None else from_arrays(arrays, names, specs, f"validation data ({os.fspath(path)})")


def check_batch_size(batch_size: int) -> int:
    if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
    return int(batch_size)


__all__ = ["ArrayData", "IterableData", "Batch", "DataLike", "as_data", "from_arrays", "load_npz",
           "npz_validation_split", "check_array", "check_batch_size", "describe_spec", "describe_array",
           "is_path", "VAL_PREFIX"]
