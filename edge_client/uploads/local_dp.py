"""Privacy applied on the device before anything leaves it: local DP and distributed-DP noise.

`LocalDP(clip, noise)` turns the trained vector w into g + clip_C(w - g) + N(0, (noise*C)^2):
the coordinator (and anyone) sees only a clipped, noised delta — local DP, for users who trust
nobody, at a large utility cost. The same object with `noise = z / sqrt(expected clients)`
is the device's part of distributed DP under secure aggregation: no single upload carries much
noise, but the masked sum carries z*C in total. It is an `UpdateHook` (task, global, trained).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedort.common.dp_noise import clip_to_norm, gaussian
from fedort.common.errors import ConfigError


@dataclass
class LocalDP:
    """Clip the delta to L2 norm `clip`, add N(0, (noise * clip)^2) per coordinate."""

    clip: float
    noise: float
    rng: np.random.Generator = field(default_factory=np.random.default_rng, repr=False)

    def __post_init__(self) -> None:
        if not self.clip > 0:
            raise ConfigError(f"local_dp_clip must be > 0, got {self.clip}")
        if not self.noise >= 0:
            raise ConfigError(f"local_dp_noise (a multiplier of the clip) must be >= 0, got {self.noise}")

    @property
    def std(self) -> float:
        return self.noise * self.clip

    def privatize(self, delta: np.ndarray) -> np.ndarray:
        clipped, _ = clip_to_norm(delta, self.clip)
        return clipped + gaussian(clipped.size, self.std, self.rng)

    def __call__(self, task: Any, global_vector: np.ndarray, trained: np.ndarray) -> np.ndarray:
        g = np.asarray(global_vector, dtype=np.float64)
        return (g + self.privatize(np.asarray(trained, dtype=np.float64) - g)).astype(np.float32)
