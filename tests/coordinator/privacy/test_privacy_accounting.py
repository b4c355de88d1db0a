"""Epsilon comes from dp-accounting's RDP accountant; the budget search inverts it."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting import rdp

from fedort.coordinator.privacy.accounting import epsilon, rounds_within_budget
from fedort.common.errors import ConfigError


@pytest.mark.slow
@pytest.mark.parametrize("q,z,steps,delta", [(0.1, 1.1, 100, 1e-5), (0.01, 0.8, 1000, 1e-6), (1.0, 5.0, 10, 1e-5)])
def test_epsilon_equals_the_library_called_directly(q, z, steps, delta):
    accountant = rdp.RdpAccountant()
    accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), steps)
    assert epsilon(q, z, steps, delta) == accountant.get_epsilon(delta)


def test_no_rounds_cost_nothing_and_no_noise_costs_everything():
    assert epsilon(0.1, 1.0, 0, 1e-5) == 0.0
    assert math.isinf(epsilon(0.1, 0.0, 5, 1e-5))


@pytest.mark.slow
def test_rounds_within_budget_is_the_last_round_under_the_target():
    n = rounds_within_budget(0.1, 1.0, 1e-5, 3.0)
    assert epsilon(0.1, 1.0, n, 1e-5) <= 3.0 < epsilon(0.1, 1.0, n + 1, 1e-5)


def test_a_budget_too_small_for_one_round_allows_none():
    assert rounds_within_budget(1.0, 0.5, 1e-5, 0.01) == 0


def test_a_sampling_rate_above_one_is_refused():
    with pytest.raises(ConfigError, match="sampling rate"):
        epsilon(1.5, 1.0, 3, 1e-5)
