"""The one reader and validator of client data: `.npz` files of named arrays, checked before training.

A client data file (what `fedort data ...` writes, or what a user prepares) is an uncompressed or
compressed `.npz` of plain numeric arrays, one row per example:

    x                   the features, named after the model's input (float32 [N, 64] for digits)
    labels              int64 [N]; for a cross-entropy model class ids in 0 .. num_classes-1
    val_x, val_labels   optional validation split: the same names with a `val_` prefix

A model with other inputs takes arrays of those names; arrays the model does not take are ignored.
Every reader of such files (the edge client, the Trainer, the simulation, the coordinator's eval
data) goes through `read_npz`, and every check against a model through `check_model_arrays`, in
two stages, both before any training step:

* model-free (`read_npz`, `ClientData.load` / `from_arrays`): a readable file without pickles,
  rows on every array, one row count per split, finite floats, a validation split that matches;
* against the model (`ClientData.validate`, `check_model_arrays`): every input present, dtype and
  trailing shape as the manifest's `TensorSpec`s say, and class labels inside the model's class
  count (ONNX Runtime would read past the logits and train on garbage otherwise).

Each failure is a `DataError` naming the file (or data), the array, what was expected and what arrived.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedort.common.errors import DataError
from fedort.ort.artifacts import TensorSpec

VAL_PREFIX = "val_"
Arrays = dict[str, np.ndarray]
#: (label input name, number of classes) of a model whose labels are class ids
ClassLabels = tuple[str, int]


# ---- reading ------------------------------------------------------------------------------------


def read_npz(path: str | os.PathLike, names: Sequence[str] | None = None) -> Arrays:
    """Every array of a `.npz` file in memory, after the model-free checks (rows per split).

    `names`, if given, must all be in the file (e.g. the inputs every file of a data folder shares).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise DataError(f"{path} is not a readable .npz file of numpy arrays: {e}") from None
    if not arrays:
        raise DataError(f"{path} holds no arrays; expected arrays named after the model inputs, e.g. x and labels")
    if names is not None:
        require_arrays(arrays, names, str(path), "expected")
    train, val = split_validation(arrays)
    check_rows(train, str(path))
    if val:
        check_rows({VAL_PREFIX + k: v for k, v in val.items()}, str(path))
    return arrays


def split_validation(arrays: Mapping[str, np.ndarray]) -> tuple[Arrays, Arrays]:
    """(training arrays, validation arrays without their `val_` prefix)."""
    train = {k: v for k, v in arrays.items() if not k.startswith(VAL_PREFIX)}
    val = {k[len(VAL_PREFIX) :]: v for k, v in arrays.items() if k.startswith(VAL_PREFIX)}
    return train, val


# ---- model-free checks --------------------------------------------------------------------------


def require_arrays(
    arrays: Mapping[str, np.ndarray],
    names: Sequence[str],
    where: str,
    wanted: str = "the model's inputs are",
    prefix: str = "",
) -> None:
    """DataError naming what is missing unless every one of `names` is in `arrays`."""
    missing = [prefix + n for n in names if n not in arrays]
    if missing:
        raise DataError(
            f"{where} lacks array(s) {missing}; {wanted} {list(names)}, found {sorted(prefix + n for n in arrays)}"
        )


def check_rows(arrays: Mapping[str, np.ndarray], where: str) -> None:
    """Every array has a first (example) dimension, all of the same length."""
    for name, a in arrays.items():
        if np.ndim(a) == 0:
            raise DataError(f"{where}: array {name!r} is a scalar; expected one row per example")
    rows = {n: int(np.shape(a)[0]) for n, a in arrays.items()}
    if len(set(rows.values())) > 1:
        raise DataError(
            f"{where}: arrays must have the same number of rows, got " + ", ".join(f"{n}={r}" for n, r in rows.items())
        )


def check_values(arrays: Mapping[str, np.ndarray], where: str, prefix: str = "") -> None:
    """Numbers only, and no NaN or infinity in float arrays."""
    for name, a in arrays.items():
        if a.dtype.kind == "O":
            raise DataError(f"{where}: array {prefix + name!r} holds Python objects; expected numbers")
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise DataError(f"{where}: array {prefix + name!r} contains NaN or infinite values")


# ---- checks against the model -------------------------------------------------------------------


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


def check_labels(name: str, a: np.ndarray, num_classes: int, what: str) -> None:
    """Class ids must lie in 0..num_classes-1 (the model's logits have `num_classes` columns)."""
    if a.size == 0 or a.dtype.kind not in "iu":
        return
    low, high = int(a.min()), int(a.max())
    if low >= 0 and high < num_classes:
        return
    bad = a[(a < 0) | (a >= num_classes)]
    shown = high if high >= num_classes else low
    raise DataError(
        f"{what}: array {name!r} holds label {shown} ({bad.size} of {a.size} labels out of range, "
        f"from {int(bad.min())} to {int(bad.max())}); the model has {num_classes} classes, so labels "
        f"must be in 0..{num_classes - 1}"
    )


def check_model_arrays(
    arrays: Mapping[str, np.ndarray],
    names: Sequence[str],
    specs: Mapping[str, TensorSpec],
    what: str,
    labels: ClassLabels | None = None,
    prefix: str = "",
) -> None:
    """The arrays `names` of `arrays` are what the model takes: present, rows, dtype, shape, label range.

    `prefix` is only for messages (`val_x` for the validation copy of input `x`).
    """
    require_arrays(arrays, names, what, prefix=prefix)
    for name in names:
        a = arrays[name]
        if np.ndim(a) == 0:
            raise DataError(f"{what}: input {prefix + name!r} is a scalar; expected one row per example")
        check_array(prefix + name, a, specs.get(name), what)
    check_rows({n: arrays[n] for n in names}, what)
    if labels is not None and labels[0] in names:
        check_labels(prefix + labels[0], np.asarray(arrays[labels[0]]), labels[1], what)


# ---- a device's data ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientData:
    """Training arrays by input name, plus optional validation arrays (same names)."""

    train: Mapping[str, np.ndarray]
    val: Mapping[str, np.ndarray] | None = None
    source: str = "<arrays>"

    @classmethod
    def from_arrays(
        cls, train: Mapping[str, np.ndarray], val: Mapping[str, np.ndarray] | None = None, source: str = "<arrays>"
    ) -> ClientData:
        """Wrap in-memory arrays (a simulation's partition); runs the model-free checks."""
        train = {k: np.asarray(v) for k, v in train.items()}
        val = {k: np.asarray(v) for k, v in val.items()} if val else None
        data = cls(train, val, source)
        data._check_structure()
        return data

    @classmethod
    def load(cls, path: str | os.PathLike) -> ClientData:
        """Read a client `.npz` (val_* arrays become the validation split)."""
        train, val = split_validation(read_npz(path))
        return cls.from_arrays(train, val or None, source=str(path))

    @property
    def num_examples(self) -> int:
        return _rows(self.train)

    @property
    def num_val_examples(self) -> int:
        return _rows(self.val) if self.val else 0

    def _check_structure(self) -> None:
        if not self.train:
            raise DataError(
                f"{self.source} holds no training arrays (expected arrays named after the "
                f"model inputs, e.g. x and labels)"
            )
        check_rows(self.train, self.source)
        check_values(self.train, self.source)
        if self.val:
            check_rows({VAL_PREFIX + k: v for k, v in self.val.items()}, self.source)
            check_values(self.val, self.source, VAL_PREFIX)
        if self.num_examples == 0:
            raise DataError(f"{self.source}: the training arrays have no rows")
        if self.val is not None and set(self.val) != set(self.train):
            missing = sorted(VAL_PREFIX + k for k in set(self.train) - set(self.val))
            raise DataError(
                f"{self.source}: validation arrays {sorted(VAL_PREFIX + k for k in self.val)} must "
                f"match the training arrays {sorted(self.train)} with a {VAL_PREFIX!r} prefix"
                + (f"; lacks array(s) {missing}" if missing else "")
            )

    def validate(self, inputs: Sequence[TensorSpec], num_classes: int | None = None) -> None:
        """Check names, dtypes, trailing shapes and (for class labels, the last input) the label range.

        `num_classes` is the manifest's: a cross-entropy model's labels must be in 0..num_classes-1.
        """
        names = [s.name for s in inputs]
        specs = {s.name: s for s in inputs}
        labels = (names[-1], num_classes) if num_classes is not None and names else None
        check_model_arrays(self.train, names, specs, self.source, labels)
        if self.val:
            check_model_arrays(self.val, names, specs, self.source, labels, prefix=VAL_PREFIX)

    def arrays_for(self, inputs: Sequence[TensorSpec], split: str = "train") -> Arrays:
        """The arrays in model-input order (extra arrays dropped)."""
        source = self.train if split == "train" else (self.val or {})
        return {s.name: source[s.name] for s in inputs}


def _rows(arrays: Mapping[str, np.ndarray]) -> int:
    return int(next(iter(arrays.values())).shape[0]) if arrays else 0


__all__ = [
    "Arrays",
    "ClassLabels",
    "ClientData",
    "VAL_PREFIX",
    "check_array",
    "check_labels",
    "check_model_arrays",
    "check_rows",
    "check_values",
    "describe_array",
    "describe_spec",
    "read_npz",
    "require_arrays",
    "split_validation",
]
