"""`fedadagrad`: Adagrad on the server (Reddi et al. 2021, Algorithm 2, FedAdagrad).

    m_t     = β1·m_{t−1} + (1 − β1)·Δ_t
    v_t     = v_{t−1} + Δ_t²
    x_{t+1} = x_t − η·m_t / (√v_t + τ)

with Δ_t = x_t − c_t and m_0 = v_0 = 0 (as Flower; the paper allows v_0 ≥ τ², a difference of
at most τ² in v). Options and defaults: `lr` = η = 0.1, `beta1` = β1 = 0 (plain Adagrad, as
Flower's FedAdagrad, which fixes β1 = 0), `tau` = τ = 1e-3: those of Flower's current FedAdagrad
(`flwr.serverapp.strategy`; the legacy `flwr.server.strategy` one has τ = 1e-9).
"""

from __future__ import annotations

import numpy as np

from fedort.coordinator.aggregation.server_optimizers.base import Option, ServerOptimizer


class FedAdagrad(ServerOptimizer):
    name = "fedadagrad"
    options = (Option("lr", 0.1, "lr"), Option("beta1", 0.0, "beta"), Option("tau", 1e-3, "tau"))
    moments = ("m", "v")

    def _step(self, x, delta, moments, t):
        m, v = moments
        m = self.beta1 * m + (1.0 - self.beta1) * delta
        v = v + delta * delta
        return x - self.lr * m / (np.sqrt(v) + self.tau), m, v
