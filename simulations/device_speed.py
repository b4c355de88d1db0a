"""Simulated device speeds: a per-client factor on compute time, for sync-vs-async comparisons.

A factor f means the client needs f times the baseline time per local step (1 = baseline,
10 = ten times slower). Factors are drawn once per client from a spec and a seed, so a scenario
gives every client the same speed in every run and under every backend:

| spec | factors |
| --- | --- |
| `uniform` | every client 1 |
| `lognormal:SIGMA` | exp(SIGMA·z), z ~ N(0, 1): median 1, log-std SIGMA ≥ 0 |
| `slow:F:K` | exactly round(F·N) clients (seeded choice) are K× slower (0 ≤ F ≤ 1, K ≥ 1), the rest 1 |

`slow:0.3:10` makes 30 % of devices 10× slower. Simulated compute time of a local
round: `compute_seconds(factor, steps, step_seconds)`. The simulation honours them on a virtual
clock (`simulations/virtual_clock.py`, `--device-speed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

import numpy as np

from fedort.common.errors import ConfigError
from fedort.common.settings.specs import spec_number, split_spec

SPECS = "uniform | lognormal:SIGMA | slow:F:K"
_STREAM = 0x5BEED  # separates this draw from the seed's other uses (partition, selection, shuffling)


@dataclass(frozen=True)
class DeviceSpeed:
    kind: str
    sigma: float = 0.0
    fraction: float = 0.0
    slowdown: float = 1.0

    def factors(self, clients: int, seed: int) -> np.ndarray:
        """One compute-time factor per client (float64, length `clients`), reproducible from `seed`."""
        if not isinstance(clients, int) or clients < 0:
            raise ConfigError(f"clients must be an integer >= 0, got {clients!r}")
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), _STREAM]))
        if self.kind == "uniform":
            return np.ones(clients)
        if self.kind == "lognormal":
            return np.exp(self.sigma * rng.standard_normal(clients))
        out = np.ones(clients)
        slow = int(round(self.fraction * clients))
        out[rng.permutation(clients)[:slow]] = self.slowdown
        return out

    def __str__(self) -> str:
        if self.kind == "uniform":
            return "uniform"
        if self.kind == "lognormal":
            return f"lognormal:{self.sigma!r}"
        return f"slow:{self.fraction!r}:{self.slowdown!r}"


def parse_device_speed(spec: str) -> DeviceSpeed:
    """The speed model a spec names (table above); ConfigError says what was expected."""
    name, args = split_spec(spec, "device speed", SPECS, {"uniform": 0, "lognormal": 1, "slow": 2})
    whats = ("SIGMA",) if name == "lognormal" else ("F", "K")
    values = [spec_number(x, what, str(spec), "device speed") for x, what in zip(args, whats)]
    if name == "lognormal":
        if values[0] < 0:
            raise ConfigError(f"device speed {spec!r}: SIGMA must be >= 0, got {values[0]!r}")
        return DeviceSpeed("lognormal", sigma=values[0])
    if name == "slow":
        if not 0 <= values[0] <= 1:
            raise ConfigError(f"device speed {spec!r}: F must be in [0, 1], got {values[0]!r}")
        if values[1] < 1:
            raise ConfigError(f"device speed {spec!r}: K must be >= 1 (a slowdown), got {values[1]!r}")
        return DeviceSpeed("slow", fraction=values[0], slowdown=values[1])
    return DeviceSpeed("uniform")


@overload
def compute_seconds(factor: float, steps: int, step_seconds: float) -> float: ...
@overload
def compute_seconds(factor: float | np.ndarray, steps: int | np.ndarray, step_seconds: float) -> float | np.ndarray: ...
def compute_seconds(factor: float | np.ndarray, steps: int | np.ndarray, step_seconds: float) -> float | np.ndarray:
    """Simulated compute time of `steps` local steps at `factor` × `step_seconds` each."""
    return factor * steps * step_seconds
