"""`ServerOptimizer`: the server-update stage, global vector + combined vector -> next global vector.

Notation (Reddi et al., "Adaptive Federated Optimization", ICLR 2021): x is the global
vector of the round, c what the combiner produced from the round's updates (for FedAvg, their
example-weighted mean), and the pseudo-gradient is

    Δ = x − c          (a descent direction: x − Δ = c is plain FedAvg)

Reddi et al. and Flower write the update direction c − x (= −Δ) and step x + η·m/(√v + τ); here
the moments follow Δ and the step is x − η·m/(√v + τ). Negation is exact in IEEE arithmetic, m is
linear in Δ and v depends on Δ², so the sign convention alone changes no bit: the same parameters
give Flower's update. (Flower computes in the arrays' dtype — float32 for float32 models — and
fedort in float64, so the two agree to float32 rounding, not bit for bit.)

Precision and memory: moments are stored as float32 (4·P bytes each: 20 MB per moment at 5 M
parameters, 40 MB for Adam/Yogi, half of float64), while every step is computed in float64 over
blocks of 64 Ki elements (~3 MB of scratch) and rounded once per stored value. What `state()`
returns is exactly what the next step reads, so a state saved and loaded continues a run bit for
bit. `apply` writes the new moments to fresh arrays and swaps them in only when the whole step has
succeeded: a step that raises leaves the optimizer as it was, and arrays returned by `state()` are
never modified afterwards (peak memory during a step: old + new moments).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from fedort.common.errors import ConfigError, VectorError
from fedort.coordinator.aggregation.server_optimizers.statefile import load_state, save_state

BLOCK = 1 << 16  # elements per float64 work block


@dataclass(frozen=True)
class Option:
    """One `key=value` of a spec: its default, how its value is read and the range it must be in."""

    key: str
    default: Any
    rule: str  # "lr": finite > 0, "beta": 0 <= b < 1, "tau": finite > 0, or "choice"
    choices: tuple[str, ...] = ()

    def read(self, text: str, spec: str) -> Any:
        if self.rule == "choice":
            choice = text.strip().lower()
            if choice not in self.choices:
                raise ConfigError(
                    f"server optimizer {spec!r}: {self.key} must be one of {', '.join(self.choices)}, got {text!r}"
                )
            return choice
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"server optimizer {spec!r}: {self.key} must be a number, got {text!r}") from None
        self.check(value, spec)
        return value

    def check(self, value: Any, spec: str) -> None:
        if self.rule == "choice":
            if value not in self.choices:
                raise ConfigError(
                    f"server optimizer {spec!r}: {self.key} must be one of {', '.join(self.choices)}, got {value!r}"
                )
            return
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if self.rule == "beta":
            ok = ok and 0 <= value < 1
            expected = "a number in [0, 1)"
        else:
            ok = ok and value > 0
            expected = "a finite number > 0"
        if not ok:
            raise ConfigError(f"server optimizer {spec!r}: {self.key} must be {expected}, got {value!r}")

    def text(self, value: Any) -> str:
        return value if self.rule == "choice" else repr(float(value))


class ServerOptimizer:
    """Base of the server optimizers: spec handling, input checks, blockwise float64 steps, state.

    Subclasses set `name`, `options`, `moments` (names of their O(P) float32 state arrays) and
    implement `_step(x, delta, moments, t)` on float64 blocks: it returns the new x block and the
    new moment blocks, in the order of `moments`; `t` is the 1-based number of this step.
    """

    name: ClassVar[str] = ""
    options: ClassVar[tuple[Option, ...]] = ()
    moments: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **values: Any) -> None:
        known = {o.key: o for o in self.options}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(_unknown_keys(self.name, unknown, known))
        for key, option in known.items():
            value = values.get(key, option.default)
            option.check(value, self.name)
            setattr(self, key, float(value) if option.rule != "choice" else value)
        self.step = 0
        self.length: int | None = None
        self._moments: dict[str, np.ndarray] = {}

    # ---- the stage ----------------------------------------------------------------------------

    def apply(self, global_vector: np.ndarray, combined: np.ndarray) -> np.ndarray:
        """The next global vector (float32) from this round's global vector and the combiner's output."""
        length = self._check_inputs(global_vector, combined)
        t = self.step + 1
        out = np.empty(length, dtype=np.float32)
        new = {name: np.empty(length, dtype=np.float32) for name in self.moments}
        old = self._moments
        for start in range(0, length, BLOCK):
            stop = min(length, start + BLOCK)
            x = global_vector[start:stop].astype(np.float64)
            delta = x - combined[start:stop].astype(np.float64)
            blocks = [
                old[n][start:stop].astype(np.float64) if n in old else np.zeros(stop - start) for n in self.moments
            ]
            x_new, *moments = self._step(x, delta, blocks, t)
            with np.errstate(over="ignore"):  # an overflow to Inf is refused just below, with a message
                out[start:stop] = x_new
            if not np.isfinite(out[start:stop]).all():
                raise VectorError(
                    f"{self}: step {t} produced non-finite values (inputs were finite); the state is unchanged"
                )
            for name, block in zip(self.moments, moments):
                new[name][start:stop] = block
        for array in new.values():
            array.flags.writeable = False
        self._moments, self.step, self.length = new, t, length
        return out

    def _step(self, x: np.ndarray, delta: np.ndarray, moments: list[np.ndarray], t: int) -> tuple[np.ndarray, ...]:
        raise NotImplementedError

    def _check_inputs(self, global_vector: np.ndarray, combined: np.ndarray) -> int:
        if not isinstance(global_vector, np.ndarray) or global_vector.dtype != np.float32 or global_vector.ndim != 1:
            raise VectorError(
                f"{self.name}: the global vector must be a 1-D float32 array, got {_describe(global_vector)}"
            )
        if not isinstance(combined, np.ndarray) or combined.dtype not in (np.float32, np.float64) or combined.ndim != 1:
            raise VectorError(
                f"{self.name}: the combined vector must be a 1-D float32 or float64 array, got {_describe(combined)}"
            )
        length = global_vector.shape[0]
        if combined.shape[0] != length:
            raise VectorError(
                f"{self.name}: the combined vector has {combined.shape[0]} elements, the global vector {length}"
            )
        if self.length is not None and self.length != length:
            raise VectorError(
                f"{self.name}: this optimizer's state is for {self.length} elements, the vectors have {length}"
            )
        if not all(np.isfinite(combined[i : i + BLOCK]).all() for i in range(0, length, BLOCK)):  # no O(P) mask
            raise VectorError(f"{self.name}: the combined vector holds non-finite values")
        return length

    # ---- state --------------------------------------------------------------------------------

    def state(self) -> dict[str, np.ndarray | int | float]:
        """`step` (applies so far) and the moment arrays (read-only float32; absent before the first step)."""
        return {"step": self.step, **self._moments}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Continue from `state()` of an optimizer of the same spec (checked: keys, step, shapes, dtype)."""
        step = state.get("step")
        if not isinstance(step, (int, np.integer)) or isinstance(step, bool) or step < 0:
            raise ConfigError(f"{self}: state 'step' must be an integer >= 0, got {step!r}")
        extra = sorted(set(state) - {"step", *self.moments})
        if extra:
            raise ConfigError(f"{self}: unexpected state entries {extra}; expected step and {list(self.moments)}")
        present = [n for n in self.moments if n in state]
        if present and len(present) != len(self.moments):
            raise ConfigError(f"{self}: state has moments {present}, expected all of {list(self.moments)} or none")
        if not present and step > 0 and self.moments:
            raise ConfigError(f"{self}: state at step {step} lacks its moments {list(self.moments)}")
        moments, length = {}, None
        for name in present:
            array = state[name]
            if not isinstance(array, np.ndarray) or array.dtype != np.float32 or array.ndim != 1:
                raise ConfigError(f"{self}: state {name!r} must be a 1-D float32 array, got {_describe(array)}")
            if length is not None and array.shape[0] != length:
                raise VectorError(f"{self}: state moments have different lengths ({length} and {array.shape[0]})")
            length = array.shape[0]
            copy = np.array(array, dtype=np.float32, copy=True)
            copy.flags.writeable = False
            moments[name] = copy
        self._moments, self.step = moments, int(step)
        self.length = length if present else None

    def save(self, path: str | Path) -> None:
        """Write `state()` to one file atomically (see `statefile`)."""
        save_state(self, Path(path))

    def load(self, path: str | Path, length: int | None = None, step: int | None = None) -> None:
        """Continue from a file `save` wrote for this spec; if given, checks the vector `length` and the
        `step` (applies so far: a file saved for a round that then failed to commit is one ahead)."""
        load_state(self, Path(path), length, step)

    # ---- spec ---------------------------------------------------------------------------------

    def __str__(self) -> str:
        """The canonical spec: every option, in a fixed order; parsing it gives the same optimizer."""
        if not self.options:
            return self.name
        return self.name + ":" + ",".join(f"{o.key}={o.text(getattr(self, o.key))}" for o in self.options)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self} step={self.step}>"


def _unknown_keys(name: str, unknown: list[str], known: Mapping[str, Option]) -> str:
    if not known:
        return f"server optimizer {name!r} takes no options, got {', '.join(unknown)}"
    return f"server optimizer {name!r} has no option {', '.join(unknown)}; its options: {', '.join(known)}"


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    return type(value).__name__
