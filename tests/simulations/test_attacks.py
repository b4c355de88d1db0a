"""simulations.attacks: Byzantine updates, who plays them, and — end to end on digits — that the
robust strategies hold where FedAvg breaks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedort.common.errors import ConfigError
from fedort.simulations.attacks import choose_attackers, parse_attack
from fedort.simulations.config import SimulationConfig, load_config
from fedort.simulations.runner import run_simulation


def test_sign_flip_uploads_the_negated_update_scaled_by_k():
    g, v = np.array([1.0, 2.0], np.float32), np.array([1.5, 1.0], np.float32)
    np.testing.assert_allclose(parse_attack("sign-flip:3")(None, g, v), g - 3 * (v - g))


def test_sign_flip_defaults_to_k_4():
    g, v = np.zeros(3, np.float32), np.ones(3, np.float32)
    np.testing.assert_allclose(parse_attack("sign-flip")(None, g, v), -4.0)


def test_scale_boosts_the_update():
    g, v = np.ones(4, np.float32), np.full(4, 1.1, np.float32)
    out = parse_attack("scale:10")(None, g, v)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, 2.0, rtol=1e-5)


@pytest.mark.parametrize("spec, message", [
    ("flip", "unknown attack 'flip'; expected sign-flip[:K] | scale:K"),
    ("scale", "expected scale:K"),
    ("scale:-2", "K must be a finite number > 0"),
    ("sign-flip:x", "K must be a number, got 'x'"),
])
def test_a_bad_attack_spec_is_a_config_error(spec, message):
    with pytest.raises(ConfigError) as info:
        parse_attack(spec)
    assert message in str(info.value)


def test_attackers_are_a_seeded_share_of_the_clients():
    ids = [f"client-{i:04d}" for i in range(10)]
    chosen = choose_attackers(ids, 0.2, seed=0)
    assert len(chosen) == 2 and chosen <= set(ids)
    assert choose_attackers(list(reversed(ids)), 0.2, seed=0) == chosen
    assert choose_attackers(ids, 0.0, seed=0) == frozenset()


@pytest.mark.parametrize("settings, message", [
    (dict(byzantine_fraction=1.0), "byzantine_fraction must be in [0, 1)"),
    (dict(attack="boost"), "unknown attack 'boost'"),
    (dict(strategy="krum"), "strategy 'krum' takes 1 parameter(s)"),
])
def test_simulation_config_checks_the_robustness_settings(settings, message, tmp_path):
    with pytest.raises(ConfigError) as info:
        SimulationConfig.from_mapping(dict(out=tmp_path, **settings))
    assert message in str(info.value)


# ---- end to end: 10 clients on digits, 2 of them sign-flipping ------------------------------------

ROBUST = ("median", "trimmed-mean:0.2", "multi-krum:2:5")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, float]:
    """Final test accuracy of a clean FedAvg run and of each strategy with 20 % sign-flipping clients."""
    base = dict(clients=10, rounds=20, partition="iid", local_epochs=1, batch_size=16, lr=0.02, seed=0,
                workers=2, progress=False)
    folder = tmp_path_factory.mktemp("robust")
    out = {"clean": run_simulation(SimulationConfig.from_mapping(dict(out=folder / "clean", **base))).records[-1].accuracy}
    for strategy in ("fedavg",) + ROBUST:
        result = run_simulation(SimulationConfig.from_mapping(dict(out=folder / strategy.replace(":", "-"), strategy=strategy,
                                                 byzantine_fraction=0.2, attack="sign-flip", **base)))
        out[strategy] = result.records[-1].accuracy
    return out


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_fedavg_breaks_under_20_percent_sign_flipping_clients(runs):
    assert runs["clean"] >= 0.93, runs
    assert runs["fedavg"] <= runs["clean"] - 0.20, runs


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ROBUST)
def test_robust_strategies_stay_within_3_points_of_the_clean_run(runs, strategy):
    assert runs[strategy] >= runs["clean"] - 0.03, runs


def test_the_byzantine_scenario_file_sets_strategy_and_attack(tmp_path):
    scenario = Path(__file__).resolve().parents[2] / "simulations" / "scenarios" / "digits_byzantine.toml"
    cfg = load_config(scenario, {"out": tmp_path, "strategy": "krum:2"})
    assert (cfg.strategy, cfg.byzantine_fraction, cfg.attack) == ("krum:2", 0.2, "sign-flip")
