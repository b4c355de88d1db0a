"""FedBuff's buffer (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation",
AISTATS 2022): fold staleness-weighted client deltas into one O(P) accumulator, every K updates.

A device trains on the global version b it has and reports Δᵢ = (its model − version b) with nᵢ
examples; at current version v its staleness is sᵢ = v − b. The buffer keeps

    A = Σᵢ w(sᵢ)·nᵢ·Δᵢ,   N = Σᵢ nᵢ

and after K updates yields the mean delta A / N; the next global version is then
x_{v+1} = x_v + A / N with a server learning rate of 1 (FedBuff's η_g: feed
`combined = x_v + A / N` to a server optimizer, e.g. `fedavgm:lr=η_g,momentum=0`). Dividing by
N, not by Σ w·n, is what makes stale updates move the model less — FedBuff divides by K; the two
agree when every nᵢ is equal. Updates with sᵢ > S (max staleness) are refused with
`TooStaleError` (FAILED_PRECONDITION), updates from a version ahead of v with ProtocolError.

Pure code: versions, durability and the protocol are the async engine's (coordinator.async_engine),
which keeps one buffer per run in float64 so that a restart's replay (in client-id order) gives
the uninterrupted run's sum to float32 rounding.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedort.common.errors import ConfigError, ProtocolError, TooStaleError, VectorError
from fedort.coordinator.fedbuff.staleness import StalenessWeight

_BLOCK = 1 << 16


@dataclass(frozen=True)
class BufferedAggregate:
    """What one full buffer yields: the mean delta A / N (float32) and what went into it."""

    version: int  # the global version the deltas are applied to (next is version + 1)
    delta: np.ndarray  # A / N
    updates: int
    examples: int  # N
    weight: float  # Σ w(s)·n
    staleness: Mapping[int, int]  # staleness -> updates, for this buffer

    def combined(self, global_vector: np.ndarray) -> np.ndarray:
        """x_v + A / N as float32: what a server optimizer takes as the combined vector."""
        if global_vector.shape != self.delta.shape:
            raise VectorError(f"global vector has shape {global_vector.shape}, the buffer {self.delta.shape}")
        return np.add(global_vector, self.delta, dtype=np.float32)


@dataclass
class UpdateBuffer:
    """Σ w(s)·n·Δ over accepted updates until `buffer_size` of them arrived; memory O(P)."""

    length: int
    buffer_size: int
    max_staleness: int
    weight: StalenessWeight
    version: int = 0
    dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float32))
    histogram: Counter = field(default_factory=Counter, init=False)  # staleness -> accepted updates, all time
    refused: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        for name, minimum in (("length", 1), ("buffer_size", 1), ("max_staleness", 0), ("version", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
        self._acc = np.zeros(self.length, dtype=self.dtype)
        self._scratch = np.empty(min(self.length, _BLOCK), dtype=self.dtype)
        self._reset()

    def _reset(self) -> None:
        self._acc[:] = 0
        self.count, self.examples, self.weight_sum = 0, 0, 0.0
        self._staleness: Counter = Counter()

    @property
    def ready(self) -> bool:
        """True once `buffer_size` updates are folded in: time to `take()` and commit a version."""
        return self.count >= self.buffer_size

    def staleness_of(self, base_version: int) -> int:
        """Versions between `base_version` and the current one; refuses too stale or future versions."""
        if not isinstance(base_version, int) or base_version < 0 or base_version > self.version:
            raise ProtocolError(
                f"update trained on version {base_version!r}, expected a version in 0..{self.version} "
                f"(the current global version)"
            )
        staleness = self.version - base_version
        if staleness > self.max_staleness:
            self.refused += 1
            raise TooStaleError(
                f"update trained on version {base_version} is {staleness} versions behind the current "
                f"version {self.version}; at most {self.max_staleness} accepted: download the latest "
                "global vector and train again"
            )
        return staleness

    def add(
        self, vector: np.ndarray, num_examples: int, base_version: int, base_vector: np.ndarray | None = None
    ) -> bool:
        """Fold one update in; `vector` is the delta Δ, or the trained model if `base_vector` (version
        `base_version`'s global) is given. Returns `ready`. Checked before anything is folded."""
        staleness = self.staleness_of(base_version)
        if vector.shape != (self.length,) or (base_vector is not None and base_vector.shape != (self.length,)):
            raise VectorError(f"update must have {self.length} elements, got shape {vector.shape}")
        if not isinstance(num_examples, int) or isinstance(num_examples, bool) or num_examples < 1:
            raise VectorError(f"num_examples must be an integer >= 1, got {num_examples!r}")
        scale = self.weight(staleness) * num_examples
        factor = self.dtype.type(scale)
        acc, scratch = self._acc, self._scratch
        for start in range(0, self.length, _BLOCK):
            stop = min(self.length, start + _BLOCK)
            tmp = scratch[: stop - start]
            if base_vector is None:
                np.multiply(vector[start:stop], factor, out=tmp)
            else:
                np.subtract(vector[start:stop], base_vector[start:stop], out=tmp)
                np.multiply(tmp, factor, out=tmp)
            np.add(acc[start:stop], tmp, out=acc[start:stop])
        self.count += 1
        self.examples += num_examples
        self.weight_sum += scale
        self._staleness[staleness] += 1
        self.histogram[staleness] += 1
        return self.ready

    def take(self) -> BufferedAggregate:
        """The buffer's mean delta; empties the buffer and advances `version` by one."""
        if self.count == 0:
            raise VectorError("the buffer is empty: no update to aggregate")
        delta = np.empty(self.length, dtype=np.float32)
        np.divide(self._acc, self.dtype.type(self.examples), out=delta, casting="same_kind")
        out = BufferedAggregate(self.version, delta, self.count, self.examples, self.weight_sum, dict(self._staleness))
        self.version += 1
        self._reset()
        return out

    # ---- durability hooks ---------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything needed to continue: the accumulator (a copy) and the counters."""
        return {
            "version": self.version,
            "acc": self._acc.copy(),
            "count": self.count,
            "examples": self.examples,
            "weight_sum": self.weight_sum,
            "staleness": dict(self._staleness),
            "histogram": dict(self.histogram),
            "refused": self.refused,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        acc = state["acc"]
        if not isinstance(acc, np.ndarray) or acc.shape != (self.length,):
            raise VectorError(
                f"buffer state accumulator must have {self.length} elements, got "
                f"{getattr(acc, 'shape', type(acc).__name__)}"
            )
        self._acc[:] = acc
        self.version, self.count, self.examples = int(state["version"]), int(state["count"]), int(state["examples"])
        self.weight_sum, self.refused = float(state["weight_sum"]), int(state["refused"])
        self._staleness = Counter({int(k): int(v) for k, v in state["staleness"].items()})
        self.histogram = Counter({int(k): int(v) for k, v in state["histogram"].items()})
