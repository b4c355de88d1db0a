"""User-level central DP for FedAvg (DP-FedAvg, McMahan et al., ICLR 2018) as pipeline stages.

    per update:  d_i <- d_i * min(1, C / ||d_i||)              (`CentralDP.clip`)
    on the sum:  mean = (sum_i d_i + N(0, (z C)^2 I)) / n_exp   (`CentralDP.release`)

The denominator is the EXPECTED cohort size n_exp (fixed, public), not the number that arrived,
so one client's presence changes the sum by at most C and nothing else: the sensitivity the
Gaussian noise is calibrated to. Updates are unweighted (each client counts once). Trust: the
coordinator sees every clipped update in the clear and is trusted to add the noise; with secure
aggregation the clients add it instead (`fedort.protos.dp_noise.distributed_noise_std`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedort.protos.dp_noise import clip_to_norm, gaussian
from fedort.protos.errors import ConfigError


@dataclass(frozen=True)
class CentralDP:
    noise_multiplier: float
    expected_clients: int

    def __post_init__(self) -> None:
        if not (self.noise_multiplier >= 0 and math.isfinite(self.noise_multiplier)):
            raise ConfigError(f"dp_noise_multiplier must be finite and >= 0, got {self.noise_multiplier}")
        if self.expected_clients < 1:
            raise ConfigError(f"DP expected cohort size must be >= 1, got {self.expected_clients}")

    @staticmethod
    def clip(delta: np.ndarray, clip: float) -> tuple[np.ndarray, bool]:
        """The clipped delta and whether it was within C (the bit adaptive clipping counts)."""
        return clip_to_norm(delta, clip)

    def noise_std(self, clip: float) -> float:
        return self.noise_multiplier * clip

    def release(self, delta_sum: np.ndarray, clip: float, rng: np.random.Generator | None = None,
                add_noise: bool = True) -> np.ndarray:
        """Noised sum over the expected cohort size. `add_noise=False` when the clients already
        added it (distributed DP under secure aggregation): the division stays the same."""
        total = np.asarray(delta_sum, dtype=np.float64)
        if add_noise:
            total = total + gaussian(total.size, self.noise_std(clip), rng)
        return total / self.expected_clients
