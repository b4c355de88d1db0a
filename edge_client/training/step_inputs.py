"""A training or eval step's inputs checked against the model's declared inputs (dtype, rank, fixed dims).

ORT's own error for a wrong input is a long native message about the graph; this check runs first
and says which input is wrong, what it must be and what arrived (DataError). It runs on every step,
so each input's check is compiled once from its `TensorSpec`: numpy dtype, rank, and the
(axis, size) pairs of its fixed dimensions. An input whose element type numpy cannot name is
left to ORT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fedort.common.errors import DataError
from fedort.ort.artifacts import TensorSpec


class StepInputs:
    """The compiled checks of the inputs named in `specs` (see the module docstring)."""

    def __init__(self, specs: Mapping[str, TensorSpec]) -> None:
        self._specs = dict(specs)
        self._checks: dict[str, tuple[np.dtype, int, tuple[tuple[int, int], ...]]] = {}
        for name, spec in self._specs.items():
            try:
                dtype = np.dtype(spec.dtype)
            except TypeError:  # an ONNX element type numpy has no name for: let ORT judge it
                continue
            fixed = tuple((axis, d) for axis, d in enumerate(spec.shape) if d is not None)
            self._checks[name] = (dtype, len(spec.shape), fixed)

    def check(self, inputs: Sequence[np.ndarray], names: Sequence[str], step: str) -> list[np.ndarray]:
        """`inputs` (in `names` order) as C-contiguous arrays, or DataError naming the first wrong one."""
        if len(inputs) != len(names):
            raise DataError(f"{step} takes {len(names)} inputs {list(names)}, got {len(inputs)}")
        # Runs on every step, so the checks are precomputed: even `dtype.name` is not free in numpy 2.
        checks = self._checks
        checked = []
        for name, value in zip(names, inputs):
            if type(value) is not np.ndarray:
                value = np.asarray(value)
            check = checks.get(name)
            if check is not None:
                dtype, ndim, fixed = check
                if value.dtype != dtype or value.ndim != ndim:
                    self._raise(name, value)
                shape = value.shape
                for axis, dim in fixed:
                    if shape[axis] != dim:
                        self._raise(name, value)
            checked.append(np.ascontiguousarray(value))
        return checked

    def _raise(self, name: str, value: np.ndarray) -> None:
        spec = self._specs[name]
        if value.dtype.name != spec.dtype:
            raise DataError(f"input {name!r} must be {spec.dtype}, got {value.dtype.name}")
        want = "[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]"
        raise DataError(f"input {name!r} must have shape {want}, got {list(value.shape)}")


__all__ = ["StepInputs"]
