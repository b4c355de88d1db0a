"""Adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy, NeurIPS 2021): C tracks a quantile.

Each round every client reports b_i = 1[||d_i|| <= C]. The coordinator releases a noised
fraction and moves C geometrically toward the target quantile gamma:

    b_bar = (sum_i b_i + N(0, sigma_b^2)) / n_exp
    C    <- C * exp(-eta * (b_bar - gamma))

The count is a second Gaussian query on the same clients; to keep the overall noise multiplier
z, the update sum uses z_delta = (z^-2 - (2 sigma_b)^-2)^(-1/2) (`delta_noise_multiplier`).
Defaults follow the paper: C0 = 0.1, eta = 0.2, sigma_b = n_exp / 20. The state is persisted
(`to_dict`/`from_dict`) so a restarted coordinator goes on from the last committed round's C.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedort.common.dp_noise import gaussian
from fedort.common.errors import ConfigError


def delta_noise_multiplier(z: float, count_std: float) -> float:
    """The multiplier left for the update sum when the clipped-count query uses std `count_std`."""
    if z <= 0:
        return 0.0
    rest = z**-2 - (2.0 * count_std) ** -2
    if rest <= 0:
        raise ConfigError(
            f"the clip-count noise (std {count_std}) uses the whole budget of z={z}; need count std > z/2 = {z / 2}"
        )
    return rest**-0.5


@dataclass(frozen=True)
class AdaptiveClip:
    clip: float = 0.1
    target_quantile: float = 0.5
    learning_rate: float = 0.2
    count_std: float = 0.0  # sigma_b; `for_cohort` sets n_exp / 20

    def __post_init__(self) -> None:
        if not (self.clip > 0 and math.isfinite(self.clip)):
            raise ConfigError(f"adaptive clip must be finite and > 0, got {self.clip}")
        if not 0 < self.target_quantile < 1:
            raise ConfigError(f"adaptive clip quantile must be in (0, 1), got {self.target_quantile}")
        if not (self.learning_rate > 0 and self.count_std >= 0):
            raise ConfigError(
                f"adaptive clip needs learning_rate > 0 and count_std >= 0, got {self.learning_rate}, {self.count_std}"
            )

    @classmethod
    def for_cohort(cls, expected_clients: int, target_quantile: float = 0.5, clip: float = 0.1) -> AdaptiveClip:
        return cls(clip, target_quantile, 0.2, expected_clients / 20.0)

    def update(
        self, unclipped_count: int, expected_clients: int, rng: np.random.Generator | None = None
    ) -> AdaptiveClip:
        """The next round's state from this round's count of clients with ||d_i|| <= C."""
        noised = unclipped_count + float(gaussian(1, self.count_std, rng)[0])
        fraction = noised / expected_clients
        return replace(self, clip=self.clip * math.exp(-self.learning_rate * (fraction - self.target_quantile)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "clip": self.clip,
            "target_quantile": self.target_quantile,
            "learning_rate": self.learning_rate,
            "count_std": self.count_std,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AdaptiveClip:
        return cls(float(d["clip"]), float(d["target_quantile"]), float(d["learning_rate"]), float(d["count_std"]))
