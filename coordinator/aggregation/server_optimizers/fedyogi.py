"""`fedyogi`: Yogi on the server (Reddi et al. 2021, Algorithm 2, FedYogi).

    m_t     = β1·m_{t−1} + (1 − β1)·Δ_t
    v_t     = v_{t−1} − (1 − β2)·Δ_t²·sign(v_{t−1} − Δ_t²)
    x_{t+1} = x_t − η·m_t / (√v_t + τ)

with Δ_t = x_t − c_t and m_0 = v_0 = 0 (as Flower; the paper allows v_0 ≥ τ²). Unlike Adam, v
moves additively, by at most (1 − β2)·Δ², so it cannot shrink fast when updates get small.
v stays ≥ 0: from v_{t−1} ≥ Δ² it loses at most (1 − β2)·Δ² ≤ v_{t−1}; otherwise it grows.
Defaults: η = 0.01, β1 = 0.9, β2 = 0.99, τ = 1e-3 (the paper's; also those of Flower's current
FedYogi, `flwr.serverapp.strategy`).
"""

from __future__ import annotations

import numpy as np

from fedort.coordinator.aggregation.server_optimizers.base import Option, ServerOptimizer


class FedYogi(ServerOptimizer):
    name = "fedyogi"
    options = (
        Option("lr", 0.01, "lr"),
        Option("beta1", 0.9, "beta"),
        Option("beta2", 0.99, "beta"),
        Option("tau", 1e-3, "tau"),
    )
    moments = ("m", "v")

    def _step(self, x, delta, moments, t):
        m, v = moments
        m = self.beta1 * m + (1.0 - self.beta1) * delta
        d2 = delta * delta
        v = v - (1.0 - self.beta2) * d2 * np.sign(v - d2)
        return x - self.lr * m / (np.sqrt(v) + self.tau), m, v
