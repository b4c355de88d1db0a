"""`fedavgm`: FedAvg with server momentum (Hsu, Qi & Brown, 2019, arXiv:1909.06335).

    m_t     = β·m_{t−1} + Δ_t          (m_0 = 0, so m_1 = Δ_1)
    x_{t+1} = x_t − η·m_t

with Δ_t = x_t − c_t. Options: `lr` = η (default 1.0), `momentum` = β (default 0.0). Flower's
FedAvgM (`flwr.serverapp.strategy`, `server_learning_rate`, `server_momentum`) computes the same
update and these are its defaults, which reduce it to FedAvg; Hsu et al. use β = 0.9 with η = 1
(`fedavgm:momentum=0.9`).
"""

from __future__ import annotations

from fedort.coordinator.aggregation.server_optimizers.base import Option, ServerOptimizer


class FedAvgM(ServerOptimizer):
    name = "fedavgm"
    options = (Option("lr", 1.0, "lr"), Option("momentum", 0.0, "beta"))
    moments = ("m",)

    def _step(self, x, delta, moments, t):
        (m,) = moments
        m = self.momentum * m + delta
        return x - self.lr * m, m
