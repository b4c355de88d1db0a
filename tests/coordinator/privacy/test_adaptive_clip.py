"""Adaptive clipping moves C toward the target quantile of update norms and persists its state."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedort.coordinator.privacy.adaptive_clip import AdaptiveClip, delta_noise_multiplier
from fedort.common.dp_noise import clip_to_norm
from fedort.common.errors import ConfigError


def test_clip_converges_to_the_target_quantile_of_norms():
    rng = np.random.default_rng(0)
    state = AdaptiveClip.for_cohort(100, target_quantile=0.5, clip=0.01)
    for _ in range(300):
        norms = rng.lognormal(mean=0.0, sigma=0.3, size=100)   # median 1.0
        state = state.update(int((norms <= state.clip).sum()), 100, rng)
    assert 0.85 < state.clip < 1.15


def test_all_clients_under_the_clip_shrink_it_geometrically():
    state = AdaptiveClip(clip=1.0, target_quantile=0.5, learning_rate=0.2, count_std=0.0)
    assert math.isclose(state.update(10, 10).clip, math.exp(-0.1))


def test_state_round_trips_through_a_dict():
    state = AdaptiveClip.for_cohort(40, 0.7, 0.3)
    assert AdaptiveClip.from_dict(state.to_dict()) == state


def test_the_update_sum_keeps_the_budget_left_by_the_count_query():
    z_delta = delta_noise_multiplier(1.0, count_std=5.0)
    assert math.isclose(z_delta**-2 + (2 * 5.0) ** -2, 1.0)
    with pytest.raises(ConfigError, match="count std"):
        delta_noise_multiplier(1.0, count_std=0.4)


def test_adaptive_state_drives_the_central_clip():
    state = AdaptiveClip(clip=0.5)
    clipped, under = clip_to_norm(np.array([1.0, 0.0]), state.clip)
    assert np.allclose(clipped, [0.5, 0.0]) and not under
