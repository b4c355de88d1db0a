"""DP-FedAvg stages: clip to norm C, noise z*C on the sum, fixed denominator."""

from __future__ import annotations

import numpy as np

from fedort.coordinator.central_dp import CentralDP
from fedort.protos.dp_noise import distributed_noise_std


def test_clip_scales_a_long_delta_to_the_norm_and_keeps_a_short_one():
    long, under = CentralDP.clip(np.array([3.0, 4.0]), 1.0)
    short, under_short = CentralDP.clip(np.array([0.3, 0.4]), 1.0)
    assert np.allclose(long, [0.6, 0.8]) and not under
    assert np.array_equal(short, [0.3, 0.4]) and under_short


def test_release_divides_by_the_expected_cohort_not_the_arrivals():
    dp = CentralDP(noise_multiplier=0.0, expected_clients=10)
    assert np.array_equal(dp.release(np.full(3, 4.0), clip=1.0), np.full(3, 0.4))


def test_release_noise_has_std_z_times_c():
    dp = CentralDP(noise_multiplier=1.5, expected_clients=1)
    noised = dp.release(np.zeros(200_000), clip=2.0, rng=np.random.default_rng(0))
    assert abs(noised.std() - 3.0) < 0.03 and abs(noised.mean()) < 0.03


def test_distributed_noise_of_the_expected_cohort_adds_up_to_the_central_noise():
    rng = np.random.default_rng(1)
    std = distributed_noise_std(1.2, 0.5, expected_clients=25)
    total = sum(rng.normal(0.0, std, 100_000) for _ in range(25))
    assert abs(total.std() - 0.6) < 0.01
