"""DP-FedAvg as pipeline stages (McMahan et al., ICLR 2018; adaptive clipping: Andrew et al., NeurIPS 2021).

    transform  DPClip:     dᵢ = vᵢ − g,  dᵢ' = dᵢ · min(1, C / ‖dᵢ‖₂),  bᵢ = 1[‖dᵢ‖₂ ≤ C]
    combiner   NoisedSum:  c = g + (Σᵢ dᵢ' + N(0, (z_Δ·C)² I)) / n_exp        (unweighted, streaming)
    server     DPClipState: g' = c; adaptive: C ← C·exp(−η·((Σbᵢ + N(0, σ_b²))/n_exp − γ))

The denominator n_exp is the EXPECTED cohort (the round's selection size, fixed before any update
arrives), so one client changes the released sum by at most C: the sensitivity the noise is
calibrated to. Each client counts once (num_examples is not a weight under DP). z_Δ = z without
adaptive clipping, else `adaptive_clip.delta_noise_multiplier(z, σ_b)` with σ_b = max(n_exp/20, z),
so the two Gaussian queries together spend the configured z. With distributed noise (secure aggregation) the clients add
the noise and `NoisedSum` adds none. The clip state (C, and the adaptive parameters) is the
server update's durable state, saved with each commit and restored on restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from fedort.common.dp_noise import clip_to_norm, gaussian
from fedort.common.invariants import present
from fedort.coordinator.aggregation.combiner import Combiner
from fedort.coordinator.aggregation.server_update import ServerUpdate
from fedort.coordinator.aggregation.spool import SpooledUpdate
from fedort.coordinator.aggregation.transform import Transform
from fedort.coordinator.aggregation.update import Update
from fedort.coordinator.aggregation.weighted_sum import WeightedSum
from fedort.coordinator.privacy.adaptive_clip import AdaptiveClip, delta_noise_multiplier


@dataclass
class DPClipState:
    """The DP parameters one run shares between its stages (mutable: C moves with adaptive clipping)."""

    noise_multiplier: float
    clip: float
    adaptive_quantile: float | None = None  # adaptive clipping toward this quantile (C then starts at 0.1)
    adaptive: AdaptiveClip | None = None  # created at the first round open (σ_b = n_exp / 20)
    expected_clients: int = 0  # set by the engine when a round opens
    unclipped: int = 0  # this round's Σ bᵢ
    client_noise: bool = False  # True: clients add the noise (distributed DP), the server none
    rng: np.random.Generator = field(default_factory=np.random.default_rng, repr=False)

    def open_round(self, expected_clients: int) -> None:
        """Fix n_exp for the round now opening (and start adaptive clipping on the first one)."""
        self.expected_clients = expected_clients
        if self.adaptive_quantile is not None and self.adaptive is None:
            a = AdaptiveClip.for_cohort(expected_clients, self.adaptive_quantile)
            # σ_b = n_exp/20 (the paper's choice for large cohorts), but at least z: then the count query
            # takes at most a quarter of the budget, z_Δ ≤ 1.155·z, also for small cohorts
            self.adaptive = replace(a, count_std=max(a.count_std, self.noise_multiplier))

    @property
    def current_clip(self) -> float:
        return self.adaptive.clip if self.adaptive is not None else self.clip

    @property
    def delta_multiplier(self) -> float:
        """z_Δ: the multiplier of the noise on the update sum."""
        if self.adaptive is None:
            return self.noise_multiplier
        return delta_noise_multiplier(self.noise_multiplier, self.adaptive.count_std)


class DPClip(Transform):
    """dᵢ' = clip_C(vᵢ − g); returns g + dᵢ' (float32) and counts bᵢ for adaptive clipping."""

    name = "dp-clip"

    def __init__(self, state: DPClipState) -> None:
        self.dp = state

    def apply(self, values: np.ndarray, global_vector: np.ndarray, update: Update | None) -> np.ndarray:
        g = np.asarray(global_vector, dtype=np.float64)
        clipped, within = clip_to_norm(np.asarray(values, dtype=np.float64) - g, self.dp.current_clip)
        if update is not None:
            self.dp.unclipped += int(within)
        return (g + clipped).astype(np.float32)


class NoisedSum(Combiner):
    """c = g + (Σ dᵢ' + N(0, (z_Δ·C)²)) / n_exp, folding Σ vᵢ' unweighted in float64 (O(P))."""

    name = "dp-fedavg"
    streaming = True

    def __init__(self, state: DPClipState) -> None:
        self.dp = state
        self._sum: WeightedSum | None = None

    def reset(self, length: int) -> None:
        if self._sum is None or self._sum.length != length:
            self._sum = WeightedSum(length, np.dtype(np.float64))
        self._sum.reset()
        self.dp.unclipped = 0

    def fold(self, blocks: Iterable[tuple[int, np.ndarray]], weight: float) -> None:
        total = present(self._sum, "the noised sum (reset opens it)")
        total.add_blocks(blocks, 1.0)  # unweighted: each client counts once

    def combine(self, spooled: Sequence[SpooledUpdate], global_vector: np.ndarray) -> np.ndarray:
        s = self.dp
        g = np.asarray(global_vector, dtype=np.float64)
        total = present(self._sum, "the noised sum (reset opens it)")
        delta_sum = total.total - total.count * g
        if not s.client_noise:
            delta_sum += gaussian(len(g), s.delta_multiplier * s.current_clip, s.rng)
        return (g + delta_sum / max(s.expected_clients, 1)).astype(np.float32)


class DPClipUpdate(ServerUpdate):
    """g' = c; moves an adaptive C toward its quantile from the noised count, and keeps C durable."""

    name = "dp-clip-state"

    def __init__(self, state: DPClipState) -> None:
        self.dp = state

    def apply(self, global_vector: np.ndarray, combined: np.ndarray) -> np.ndarray:
        s = self.dp
        if s.adaptive is not None:
            s.adaptive = s.adaptive.update(s.unclipped, max(s.expected_clients, 1), s.rng)
        return combined

    def state(self) -> Mapping[str, np.ndarray] | None:
        a = self.dp.adaptive
        if a is None:
            return None
        return {k: np.array([v], dtype=np.float64) for k, v in a.to_dict().items()}

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        if self.dp.adaptive_quantile is not None and "clip" in state:
            self.dp.adaptive = AdaptiveClip.from_dict({k: float(v[0]) for k, v in state.items()})
