"""A device's local data: named arrays for training and an optional validation split.

A data file is an `.npz` whose arrays are named after the model's inputs (`x`, `labels` for
digits), optionally with `val_x`, `val_labels`. Two checks, both before any training:
`ClientData.load` checks what needs no model (readable file, arrays, one row count per split,
finite floats); `validate(inputs)` checks the arrays against the manifest's input specs
(names, dtypes, trailing shapes), naming what was expected and what arrived.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from fedort.protos.errors import DataError
from fedort.edge_client.artifacts import TensorSpec
from fedort.edge_client.data import check_array

VAL_PREFIX = "val_"
Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class ClientData:
    """Training arrays by input name, plus optional validation arrays (same names)."""

    train: Mapping[str, np.ndarray]
    val: Mapping[str, np.ndarray] | None = None
    source: str = "<arrays>"

    @classmethod
    def from_arrays(cls, train: Mapping[str, np.ndarray], val: Mapping[str, np.ndarray] | None = None,
                    source: str = "<arrays>") -> "ClientData":
        """Wrap in-memory arrays (a simulation's partition); runs the model-free checks."""
        train = {k: np.asarray(v) for k, v in train.items()}
        val = {k: np.asarray(v) for k, v in val.items()} if val else None
        data = cls(train, val, source)
        data._check_structure()
        return data

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ClientData":
        """Read a client `.npz` (val_* arrays become the validation split)."""
        path = Path(path)
        if not path.is_file():
            raise DataError(f"data file not found: {path}")
        try:
            with np.load(path, allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in npz.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
            raise DataError(f"{path} is not a readable .npz file of arrays: {e}") from e
        train = {k: v for k, v in arrays.items() if not k.startswith(VAL_PREFIX)}
        val = {k[len(VAL_PREFIX):]: v for k, v in arrays.items() if k.startswith(VAL_PREFIX)}
        return cls.from_arrays(train, val or None, source=str(path))

    @property
    def num_examples(self) -> int:
        return _rows(self.train)

    @property
    def num_val_examples(self) -> int:
        return _rows(self.val) if self.val else 0

    def _check_structure(self) -> None:
        if not self.train:
            raise DataError(f"{self.source} holds no training arrays (expected arrays named after the "
                            f"model inputs, e.g. x and labels)")
        for split, arrays in (("training", self.train), ("validation", self.val or {})):
            rows = {k: (v.shape[0] if v.ndim else None) for k, v in arrays.items()}
            if any(r is None for r in rows.values()):
                raise DataError(f"{self.source}: {split} arrays must have a first (example) dimension; "
                                f"got scalars {[k for k, r in rows.items() if r is None]}")
            if len(set(rows.values())) > 1:
                raise DataError(f"{self.source}: {split} arrays must have the same number of rows, got {rows}")
            for name, a in arrays.items():
                if a.dtype.kind == "O":
                    raise DataError(f"{self.source}: array {name!r} holds Python objects; expected numbers")
                if a.dtype.kind == "f" and not np.isfinite(a).all():
                    raise DataError(f"{self.source}: array {name!r} contains NaN or infinite values")
        if self.num_examples == 0:
            raise DataError(f"{self.source}: the training arrays have no rows")
        if self.val is not None and set(self.val) != set(self.train):
            raise DataError(f"{self.source}: validation arrays {sorted(VAL_PREFIX + k for k in self.val)} must "
                            f"match the training arrays {sorted(self.train)} with a {VAL_PREFIX!r} prefix")

    def validate(self, inputs: Sequence[TensorSpec]) -> None:
        """Check names, dtypes and trailing shapes against the model's inputs (DataError if not)."""
        want = [s.name for s in inputs]
        missing = [n for n in want if n not in self.train]
        if missing:
            raise DataError(f"{self.source}: the model's inputs are {want}; missing array(s) {missing} "
                            f"(found {sorted(self.train)})")
        for split, arrays in (("", self.train), (VAL_PREFIX, self.val)):
            if not arrays:
                continue
            for spec in inputs:  # dtype and trailing shape, worded like the trainer's own check
                check_array(split + spec.name, arrays[spec.name], spec, self.source)

    def arrays_for(self, inputs: Sequence[TensorSpec], split: str = "train") -> Arrays:
        """The arrays in model-input order (extra arrays dropped)."""
        source = self.train if split == "train" else (self.val or {})
        return {s.name: source[s.name] for s in inputs}


def _rows(arrays: Mapping[str, np.ndarray]) -> int:
    return int(next(iter(arrays.values())).shape[0]) if arrays else 0


__all__ = ["ClientData", "VAL_PREFIX"]
