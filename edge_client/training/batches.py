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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard, Union

import numpy as np

from fedort.common.client_data import (
    VAL_PREFIX,
    ClassLabels,
    check_model_arrays,
    read_npz,
    split_validation,
)
from fedort.common.errors import ConfigError, DataError
from fedort.common.invariants import present
from fedort.ort.artifacts import TensorSpec

Batch = tuple[np.ndarray, ...]
DataLike = Union[Mapping[str, np.ndarray], str, os.PathLike, Iterable]


def is_path(data: object) -> TypeGuard[str | os.PathLike]:
    """True for the forms that name a .npz file (str or os.PathLike)."""
    return isinstance(data, (str, os.PathLike))


def npz_split(path: str | os.PathLike, prefix: str = "") -> Mapping[str, np.ndarray] | None:
    """The training arrays of a client .npz, or with `prefix` its validation split (None if it has none)."""
    train, val = split_validation(read_npz(path))
    if not prefix:
        return train
    return val or None


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
            yield tuple([a[start : start + batch_size] for a in arrays])


@dataclass
class IterableData:
    """Batches the user supplies; checked on the first batch of each pass, then trusted to ORT."""

    source: Iterable
    names: tuple[str, ...]
    specs: Mapping[str, TensorSpec]
    what: str
    extra_ok: bool = False  # batches may carry more arrays than `names` (labels, for predict)
    labels: ClassLabels | None = None
    _passes: int = 0

    def num_batches(self, batch_size: int) -> int | None:
        try:
            return len(self.source)  # type: ignore[arg-type]
        except TypeError:
            return None

    def batches(self, batch_size: int, rng: np.random.Generator | None = None) -> Iterator[Batch]:
        if self._passes and iter(self.source) is self.source:
            raise DataError(
                f"{self.what} is a one-shot iterator and was used up by the first epoch; "
                "pass a list (or another re-iterable) of batches to run several epochs"
            )
        self._passes += 1
        first = True
        for item in self.source:
            batch = _batch_tuple(item, self.names, self.what)
            if self.extra_ok:
                batch = batch[: len(self.names)]
            if first:
                _check_batch(batch, self.names, self.specs, self.what, self.labels)
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
    raise DataError(
        f"{what}: each batch must be a tuple of arrays {list(names)} or a dict by name, got {type(item).__name__}"
    )


def _check_batch(
    batch: Batch, names: tuple[str, ...], specs: Mapping[str, TensorSpec], what: str, labels: ClassLabels | None
) -> None:
    if len(batch) != len(names):
        raise DataError(f"{what}: the model takes {len(names)} inputs {list(names)}, a batch has {len(batch)} arrays")
    check_model_arrays(dict(zip(names, batch)), names, specs, what, labels)


def from_arrays(
    arrays: Mapping[str, np.ndarray],
    names: Sequence[str],
    specs: Mapping[str, TensorSpec],
    what: str,
    labels: ClassLabels | None = None,
    prefix: str = "",
) -> ArrayData:
    """Check a dict of arrays against the inputs `names` (and label range) and put them in input order.

    `prefix` only words the messages (`val_x` for the validation copy of input `x`).
    """
    arrays = {n: np.asarray(a) for n, a in arrays.items()}
    check_model_arrays(arrays, names, specs, what, labels, prefix)
    ordered = tuple(arrays[n] for n in names)
    if ordered[0].shape[0] == 0:
        raise DataError(f"{what} holds no examples")
    return ArrayData(tuple(np.ascontiguousarray(a) for a in ordered))


def as_data(
    data: DataLike,
    names: Sequence[str],
    specs: Mapping[str, TensorSpec],
    what: str,
    prefix: str = "",
    labels: ClassLabels | None = None,
) -> ArrayData | IterableData:
    """Any accepted data form as `ArrayData` (dict, .npz) or `IterableData` (iterable of batches).

    A .npz path is read with `client_data.read_npz`; with `prefix` (`val_`) its validation split is
    used when it has one. `labels` = (label input, class count) adds the label range check.
    """
    names = tuple(names)
    if data is None:
        raise DataError(f"{what}: no data given")
    if is_path(data):
        arrays = (npz_split(data, prefix) if prefix else None) or present(npz_split(data), "a .npz's training arrays")
        return from_arrays(arrays, names, specs, f"{what} ({os.fspath(data)})", labels)
    if isinstance(data, Mapping):
        return from_arrays(data, names, specs, what, labels)
    if isinstance(data, np.ndarray):
        raise DataError(
            f"{what}: got a single array; pass a dict {{{', '.join(repr(n) for n in names)}}} "
            "of arrays, a .npz path or an iterable of batch tuples"
        )
    if isinstance(data, Iterable):
        return IterableData(data, names, specs, what, labels=labels)
    raise DataError(
        f"{what}: expected a dict of arrays, a .npz path or an iterable of batches, got {type(data).__name__}"
    )


def npz_validation_split(
    path: str | os.PathLike, names: Sequence[str], specs: Mapping[str, TensorSpec], labels: ClassLabels | None = None
) -> ArrayData | None:
    """The `val_` split of a .npz training file, or None if it has none."""
    arrays = npz_split(path, VAL_PREFIX)
    if arrays is None:
        return None
    return from_arrays(arrays, names, specs, f"validation data ({os.fspath(path)})", labels, VAL_PREFIX)


def check_batch_size(batch_size: int) -> int:
    if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
    return int(batch_size)


__all__ = [
    "ArrayData",
    "IterableData",
    "Batch",
    "DataLike",
    "as_data",
    "from_arrays",
    "npz_split",
    "npz_validation_split",
    "check_batch_size",
    "is_path",
    "VAL_PREFIX",
]
