"""`fedadam`: Adam on the server (Reddi et al. 2021, Algorithm 2, FedAdam).

    m_t     = β1·m_{t−1} + (1 − β1)·Δ_t
    v_t     = β2·v_{t−1} + (1 − β2)·Δ_t²
    x_{t+1} = x_t − η_t·m_t / (√v_t + τ)

with Δ_t = x_t − c_t, m_0 = v_0 = 0 and t the 1-based step. `bias_correction` picks η_t:
`none` (the paper's algorithm): η_t = η; `adam` (Kingma & Ba's step size):
η_t = η·√(1 − β2^t)/(1 − β1^t); `flower` (default; what Flower's FedAdam computes at server
round t): η_t = η·√(1 − β2^(t+1))/(1 − β1^(t+1)). Defaults: η = 0.1, β1 = 0.9, β2 = 0.99,
τ = 1e-3, with Flower's bias correction: those of Flower's current FedAdam
(`flwr.serverapp.strategy`; the legacy `flwr.server.strategy` one has τ = 1e-9).
"""

from __future__ import annotations

import math

import numpy as np

from fedort.coordinator.aggregation.server_optimizers.base import Option, ServerOptimizer


class FedAdam(ServerOptimizer):
    name = "fedadam"
    options = (
        Option("lr", 0.1, "lr"),
        Option("beta1", 0.9, "beta"),
        Option("beta2", 0.99, "beta"),
        Option("tau", 1e-3, "tau"),
        Option("bias_correction", "flower", "choice", ("none", "adam", "flower")),
    )
    moments = ("m", "v")
    # set from `options` by ServerOptimizer
    lr: float
    beta1: float
    beta2: float
    tau: float
    bias_correction: str

    def step_size(self, t: int) -> float:
        """η_t of step t (1-based), per `bias_correction`."""
        if self.bias_correction == "none":
            return self.lr
        k = t if self.bias_correction == "adam" else t + 1
        return self.lr * math.sqrt(1.0 - self.beta2**k) / (1.0 - self.beta1**k)

    def _step(self, x, delta, moments, t):
        m, v = moments
        m = self.beta1 * m + (1.0 - self.beta1) * delta
        v = self.beta2 * v + (1.0 - self.beta2) * (delta * delta)
        return x - self.step_size(t) * m / (np.sqrt(v) + self.tau), m, v
