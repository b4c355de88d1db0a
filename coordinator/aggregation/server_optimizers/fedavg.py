"""`fedavg`: the combiner's output is the next global vector (server learning rate 1, no state).

    x_{t+1} = c_t        (= x_t − 1·Δ_t with Δ_t = x_t − c_t, but without its rounding)

Returned as is, bit for bit: `c` itself when it is float32 (no copy), else `c` rounded to float32
once — exactly what the engine produced before server optimizers existed.
"""

from __future__ import annotations

import numpy as np

from fedort.coordinator.aggregation.server_optimizers.base import ServerOptimizer


class FedAvg(ServerOptimizer):
    name = "fedavg"

    def apply(self, global_vector: np.ndarray, combined: np.ndarray) -> np.ndarray:
        length = self._check_inputs(global_vector, combined)
        self.step += 1
        self.length = length
        return combined if combined.dtype == np.float32 else combined.astype(np.float32)

    def state(self) -> dict[str, np.ndarray | int | float]:
        """FedAvg keeps nothing between rounds (`step` is bookkeeping only)."""
        return {"step": self.step}
