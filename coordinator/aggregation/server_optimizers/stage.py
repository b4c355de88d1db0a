"""The server optimizer as the pipeline's server-update stage (stage 4), and the run's configured chain.

    strategy = configured_strategy(config)        # --strategy chain + --server-optimizer as its server update
    g' = strategy.server_update.apply(g, c)      # c: whatever the combiner produced (mean, median, Krum, ...)

`ServerOptimizerStage` adapts a `ServerOptimizer` to the `ServerUpdate` interface. Its `state()` is
the optimizer's state as named arrays (a JSON `meta` entry with the canonical spec, the vector
length and the step, plus the float32 moments), which the round engine writes atomically with
each round's commit (server-state/round-NNNN.npz) and hands back to `load_state` on restart; the
same checks as the optimizer's own state file apply (a file of another spec or length is refused
with a message naming both). Each step also reports ‖Δ‖ and ‖g' − g‖, which the engine records
with the round's metrics (`server_pseudo_gradient_norm`, `server_step_norm`). `fedavg` is not wrapped at all: it stays the identity server update,
so plain FedAvg is bit for bit what it was and writes no server state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from fedort.common.errors import ConfigError
from fedort.coordinator.aggregation.server_optimizers import parse_server_optimizer
from fedort.coordinator.aggregation.server_optimizers.base import BLOCK, ServerOptimizer
from fedort.coordinator.aggregation.server_optimizers.statefile import pack_state, unpack_state
from fedort.coordinator.aggregation.server_update import ServerUpdate
from fedort.coordinator.aggregation.strategies import Strategy, parse_strategy

if TYPE_CHECKING:
    from fedort.coordinator.config import CoordinatorConfig


class ServerOptimizerStage(ServerUpdate):
    """g' = optimizer.apply(g, c): Δ = g − c feeds FedAvgM / FedAdagrad / FedAdam / FedYogi (float32 out)."""

    def __init__(self, optimizer: ServerOptimizer) -> None:
        self.optimizer = optimizer
        self.name = str(optimizer)

    def apply(self, global_vector: np.ndarray, combined: np.ndarray) -> np.ndarray:
        out = self.optimizer.apply(global_vector, combined)
        self._metrics = {
            "server_pseudo_gradient_norm": _distance(global_vector, combined),
            "server_step_norm": _distance(out, global_vector),
        }
        return out

    def metrics(self) -> Mapping[str, float]:
        """‖Δ‖ = ‖g − c‖ and ‖g' − g‖ of the last step (float64, blockwise): how far the optimizer moved."""
        return dict(getattr(self, "_metrics", {}))

    def state(self) -> Mapping[str, np.ndarray]:
        return pack_state(self.optimizer)

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        unpack_state(self.optimizer, state, "server state")

    @property
    def step(self) -> int:
        """How many times `apply` has run in this run (restored by `load_state`)."""
        return self.optimizer.step


def _distance(a: np.ndarray, b: np.ndarray) -> float:
    total = 0.0
    for i in range(0, len(a), BLOCK):
        d = a[i : i + BLOCK].astype(np.float64) - b[i : i + BLOCK]
        total += float(d @ d)
    return math.sqrt(total)


def server_update_for(spec: str) -> ServerUpdate:
    """The server-update stage a `--server-optimizer` spec names (the identity for `fedavg`)."""
    optimizer = parse_server_optimizer(spec)
    if optimizer.name == "fedavg":
        return ServerUpdate()
    return ServerOptimizerStage(optimizer)


def configured_strategy(config: CoordinatorConfig, strategy: Strategy | None = None) -> Strategy:
    """The chain a run uses: `strategy` (or `config.aggregation.strategy`) with `config.aggregation.server_optimizer` as its server update.

    A strategy built in code that already has its own (non-identity) server update cannot also take a
    `--server-optimizer` other than fedavg: that would silently drop one of the two.
    """
    chain = strategy or parse_strategy(config.aggregation.strategy)
    stage = server_update_for(config.aggregation.server_optimizer)
    if type(stage) is ServerUpdate:
        return chain
    if type(chain.server_update) is not ServerUpdate:
        raise ConfigError(
            f"strategy {chain} already has the server update {chain.server_update}; "
            f"server_optimizer {stage} cannot replace it (use server_optimizer = 'fedavg')"
        )
    chain.server_update = stage
    return chain


__all__ = ["ServerOptimizerStage", "server_update_for", "configured_strategy"]
