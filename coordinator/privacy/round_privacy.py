"""What the privacy settings change in a run: the aggregation chain, each round's ε, when to stop.

The round engine asks this object four things, each one call on plain values:

- `strategy(base)`: the chain to run. Central DP replaces FedAvg by DP-FedAvg
  (`aggregation.dp_fedavg`); secure aggregation by the secure sum (`aggregation.secure_sum`),
  without server noise when the clients add it (distributed DP).
- `round_opened(round, population)`: fixes the round's expected cohort n_exp (its selection size) and the
  sampling rate q = n_exp / population (registered clients) before any update arrives.
- `round_metrics(secagg)`: `epsilon` after this round (dp-accounting's RDP accountant over every
  committed round's q and z, `dp_sampling_rate` and `dp_noise_multiplier`; under secure
  aggregation z·√(m/n) when only m of the n_exp clients' noise reached the sum) — stored with the round's metrics, so it reaches
  metrics.csv/json, `fedort coordinator status` and the round's model.json.
- `budget_stop(round, registry)`: with a target ε, the reason to stop before a round whose ε would exceed it
  (predicted with the configured z: under secure aggregation, dropouts in that round can still
  push its ε past the target; the committed ε says so).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sized
from typing import Protocol

from fedort.common.invariants import present
from fedort.common.round_state import RoundRowState
from fedort.coordinator.aggregation import Strategy
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.engine.selection import sample_size
from fedort.coordinator.engine.training_round import TrainingRound
from fedort.coordinator.privacy.accounting import epsilon_for_rounds
from fedort.coordinator.privacy.config import parse_dp_clip
from fedort.coordinator.privacy.dp_fedavg import DPClip, DPClipState, DPClipUpdate, NoisedSum
from fedort.coordinator.state.store import StateStore


class Population(Sized, Protocol):
    """The registered clients (`len`) and those available now (`engine.registry.ClientRegistry`)."""

    def available(self) -> list[str]: ...


class Survivors(Protocol):
    @property
    def survivors(self) -> tuple[str, ...]: ...


class SecureResult(Protocol):
    """What a secure round tells accounting: its expected cohort and its result's survivors (`SecAggRound`)."""

    @property
    def expected_clients(self) -> int: ...

    @property
    def result(self) -> Survivors | None: ...


log = logging.getLogger("fedort.coordinator.engine.round_engine")

RATE = "dp_sampling_rate"
NOISE = "dp_noise_multiplier"  # the round's effective z (under secagg: z·√(m/n) when m of n added noise)


class PrivacyPlan:
    """The privacy side of one run, built from the coordinator config."""

    def __init__(self, config: CoordinatorConfig, store: StateStore) -> None:
        self.config = config
        self.store = store  # committed rounds' q and z, for accounting
        self.secagg = bool(config.privacy.secagg)
        self.dp: DPClipState | None = None
        self.rate: float | None = None
        if config.privacy.dp_clip is not None:
            clip = parse_dp_clip(config.privacy.dp_clip)
            self.dp = DPClipState(
                float(config.privacy.dp_noise_multiplier or 0.0),
                clip.norm or 0.1,
                adaptive_quantile=clip.adaptive_quantile,
                client_noise=self.secagg,
            )

    @property
    def accounting(self) -> bool:
        return self.dp is not None and self.dp.noise_multiplier > 0

    def strategy(self, base: Strategy) -> Strategy:
        """The chain this run aggregates with (`base` unless a privacy setting replaces it)."""
        if self.secagg:
            from fedort.coordinator.privacy.secagg.secure_sum import SecureSum

            # the server optimizer (base's server update) needs only the unmasked sum: it composes
            return Strategy(
                f"secagg({'dp' if self.dp else 'fedavg'})", SecureSum(self.dp), server_update=base.server_update
            )
        if self.dp is not None:
            return Strategy("dp-fedavg", NoisedSum(self.dp), [DPClip(self.dp)], DPClipUpdate(self.dp))
        return base

    def round_opened(self, r: TrainingRound, registered: int) -> None:
        """n_exp and q of the round `r` now opening among `registered` clients (kept across its retries and
        restarts)."""
        if r.expected_clients is None:
            r.expected_clients = len(r.selected)
            r.population = max(registered, r.expected_clients)
        self.rate = r.expected_clients / r.population
        if self.dp is not None:
            self.dp.open_round(r.expected_clients)

    @property
    def _accounted(self) -> DPClipState:
        """The DP state accounting reads (privacy accounting is on only with DP)."""
        return present(self.dp, "the DP clip state")

    def _history(self) -> list[tuple[float, float]]:
        z = self._accounted.noise_multiplier
        return [
            (float(row.metrics[RATE]), float(row.metrics.get(NOISE, z)))
            for row in self.store.rounds()
            if RoundRowState(row.state).committed and RATE in row.metrics
        ]

    def _round_z(self, secagg: SecureResult | None) -> float:
        """z of the round being committed: with distributed noise only the m contributing clients added theirs."""
        z = self._accounted.noise_multiplier
        if secagg is not None and secagg.result is not None:
            m, n = len(secagg.result.survivors), secagg.expected_clients
            return z * math.sqrt(min(m, n) / n)
        return z

    def round_metrics(self, secagg: SecureResult | None = None) -> dict[str, float]:
        """`epsilon` (and this round's q) to store with the round being committed (`secagg`: its secure round)."""
        if not self.accounting or self.rate is None:
            return {}
        z = self._round_z(secagg)
        eps = epsilon_for_rounds(self._history() + [(self.rate, z)], self.config.privacy.dp_delta)
        out = {RATE: self.rate, NOISE: z, "epsilon": eps}
        if self._accounted.adaptive is not None:
            out["dp_clip"] = self._accounted.adaptive.clip
        return out

    def epsilon_so_far(self) -> float:
        return epsilon_for_rounds(self._history(), self.config.privacy.dp_delta)

    def budget_stop(self, round: int, registry: Population) -> str | None:
        """Why round `round` must not run under --dp-target-epsilon among `registry`'s clients (None: it may)."""
        target = self.config.privacy.dp_target_epsilon
        if target is None or not self.accounting:
            return None
        cfg = self.config
        population = max(len(registry), 1)
        available = len(registry.available())
        q = min(1.0, sample_size(available, cfg.plan.fraction, cfg.plan.min_clients) / population)
        eps = epsilon_for_rounds(self._history() + [(q, self._accounted.noise_multiplier)], cfg.privacy.dp_delta)
        if eps <= target:
            return None
        return (
            f"privacy budget: stopped before round {round}, whose epsilon would be {eps:.4g} > "
            f"target {target:g} (delta {cfg.privacy.dp_delta:g}, q {q:.4g}, z {self._accounted.noise_multiplier:g}); "
            f"epsilon after {round - 1} round(s) is {self.epsilon_so_far():.4g}"
        )
