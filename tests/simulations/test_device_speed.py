"""Simulated device speeds: seeded per-client factors from a spec."""

from __future__ import annotations

import numpy as np
import pytest

from fedort.common.errors import ConfigError
from fedort.simulations.device_speed import compute_seconds, parse_device_speed


def test_uniform_is_every_client_at_baseline():
    assert np.array_equal(parse_device_speed("uniform").factors(7, seed=3), np.ones(7))


def test_lognormal_factors_have_median_1_and_log_std_sigma():
    factors = parse_device_speed("lognormal:0.8").factors(20000, seed=0)
    assert factors.min() > 0
    assert np.median(factors) == pytest.approx(1.0, abs=0.03)
    assert np.log(factors).std() == pytest.approx(0.8, rel=0.03)


def test_lognormal_with_sigma_0_is_uniform():
    assert np.array_equal(parse_device_speed("lognormal:0").factors(5, seed=1), np.ones(5))


def test_slow_makes_exactly_that_share_of_clients_k_times_slower():
    factors = parse_device_speed("slow:0.3:10").factors(100, seed=0)
    assert np.count_nonzero(factors == 10) == 30 and np.count_nonzero(factors == 1) == 70


def test_the_same_seed_gives_the_same_factors_and_another_seed_others():
    speed = parse_device_speed("slow:0.3:10")
    assert np.array_equal(speed.factors(50, seed=4), speed.factors(50, seed=4))
    assert not np.array_equal(speed.factors(50, seed=4), speed.factors(50, seed=5))
    lognormal = parse_device_speed("lognormal:1")
    assert np.array_equal(lognormal.factors(50, seed=4), lognormal.factors(50, seed=4))


def test_compute_seconds_scales_steps_by_the_factor():
    assert compute_seconds(10.0, 5, 0.02) == pytest.approx(1.0)
    np.testing.assert_allclose(compute_seconds(np.array([1.0, 2.0]), np.array([3, 3]), 0.5), [1.5, 3.0])


@pytest.mark.parametrize("spec, canonical", [("uniform", "uniform"), ("LogNormal:0.5", "lognormal:0.5"),
                                             ("slow:0.3:10", "slow:0.3:10.0")])
def test_str_is_a_canonical_spec(spec, canonical):
    assert str(parse_device_speed(spec)) == canonical
    assert str(parse_device_speed(canonical)) == canonical


@pytest.mark.parametrize("spec, message", [
    ("fast", "unknown device speed 'fast'"),
    ("lognormal", "takes 1 parameter(s): expected 'lognormal:SIGMA'"),
    ("lognormal:-1", "SIGMA must be >= 0"),
    ("lognormal:x", "SIGMA must be a number, got 'x'"),
    ("slow:0.3", "expected 'slow:F:K'"),
    ("slow:1.5:10", "F must be in [0, 1]"),
    ("slow:0.3:0.5", "K must be >= 1"),
    ("slow:0.3:inf", "K must be finite"),
])
def test_bad_specs_say_what_was_expected(spec, message):
    with pytest.raises(ConfigError) as err:
        parse_device_speed(spec)
    assert message in str(err.value)
