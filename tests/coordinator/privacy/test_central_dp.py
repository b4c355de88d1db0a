"""DP-FedAvg stages (coordinator/privacy/dp_fedavg.py): clip to norm C, noise z*C on the sum, fixed denominator."""

from __future__ import annotations

import numpy as np

from fedort.coordinator.privacy.dp_fedavg import DPClipState, NoisedSum
from fedort.common.dp_noise import clip_to_norm, distributed_noise_std


def release(delta_sum: np.ndarray, noise_multiplier: float, clip: float, expected_clients: int,
            rng: np.random.Generator | None = None) -> np.ndarray:
    """What NoisedSum releases for one folded `delta_sum` around a zero global vector."""
    state = DPClipState(noise_multiplier, clip, rng=rng or np.random.default_rng())
    state.expected_clients = expected_clients
    combiner = NoisedSum(state)
    combiner.reset(len(delta_sum))
    combiner.fold([(0, delta_sum)], 1.0)
    return combiner.combine((), np.zeros(len(delta_sum), dtype=np.float32)).astype(np.float64)


def test_clip_scales_a_long_delta_to_the_norm_and_keeps_a_short_one():
    long, under = clip_to_norm(np.array([3.0, 4.0]), 1.0)
    short, under_short = clip_to_norm(np.array([0.3, 0.4]), 1.0)
    assert np.allclose(long, [0.6, 0.8]) and not under
    assert np.array_equal(short, [0.3, 0.4]) and under_short


def test_release_divides_by_the_expected_cohort_not_the_arrivals():
    assert np.allclose(release(np.full(3, 4.0), 0.0, clip=1.0, expected_clients=10), np.full(3, 0.4))


def test_release_noise_has_std_z_times_c():
    noised = release(np.zeros(200_000), 1.5, clip=2.0, expected_clients=1, rng=np.random.default_rng(0))
    assert abs(noised.std() - 3.0) < 0.03 and abs(noised.mean()) < 0.03


def test_distributed_noise_of_the_expected_cohort_adds_up_to_the_central_noise():
    rng = np.random.default_rng(1)
    std = distributed_noise_std(1.2, 0.5, expected_clients=25)
    total = sum(rng.normal(0.0, std, 100_000) for _ in range(25))
    assert abs(total.std() - 0.6) < 0.01
