"""Privacy settings: parsed and validated in both configs; adaptive clipping refused with secagg."""

from __future__ import annotations

import pytest

from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.privacy.config import DpClip, parse_dp_clip
from fedort.common.errors import ConfigError
from fedort.simulations.config import load_config


@pytest.mark.parametrize("spec,clip", [("1.5", DpClip(norm=1.5)), ("adaptive", DpClip(adaptive_quantile=0.5)),
                                       ("adaptive:0.8", DpClip(adaptive_quantile=0.8))])
def test_dp_clip_specs(spec, clip):
    assert parse_dp_clip(spec) == clip


@pytest.mark.parametrize("spec", ["0", "-1", "adaptive:1.2", "adaptive:x", "big"])
def test_bad_dp_clip_specs_are_refused(spec):
    with pytest.raises(ConfigError, match="dp_clip"):
        parse_dp_clip(spec)


def test_coordinator_config_refuses_a_robust_strategy_with_secagg(tmp_path):
    with pytest.raises(ConfigError, match="needs every update in the clear"):
        CoordinatorConfig.from_mapping(dict(artifacts=tmp_path, state_dir=tmp_path, secagg=True, strategy="krum:1"))


def test_coordinator_side_clipping_with_secagg_is_refused_pointing_at_device_clipping(tmp_path):
    # the coordinator only ever holds masked vectors: a clip:NORM strategy could never run
    with pytest.raises(ConfigError, match="clip on the devices instead with --dp-clip C"):
        CoordinatorConfig.from_mapping(dict(artifacts=tmp_path, state_dir=tmp_path, secagg=True, strategy="clip:1.0"))
    with pytest.raises(ConfigError, match="clip on the devices instead with --dp-clip C"):
        load_config(None, {"secagg": True, "strategy": "clip:1.0"})


def test_device_clipping_without_noise_is_accepted_with_secagg():
    cfg = load_config(None, {"secagg": True, "dp_clip": "1.0"})
    assert cfg.privacy.secagg and cfg.privacy.dp_clip == "1.0" and cfg.privacy.dp_noise_multiplier == 0


def test_coordinator_config_refuses_noise_without_a_clip(tmp_path):
    with pytest.raises(ConfigError, match="needs dp_clip"):
        CoordinatorConfig.from_mapping(dict(artifacts=tmp_path, state_dir=tmp_path, dp_noise_multiplier=1.0))


def test_simulation_config_accepts_secagg_with_central_dp():
    cfg = load_config(None, {"secagg": True, "secagg_neighbours": 8, "dp_noise_multiplier": 1.0,
                             "dp_clip": "1.0", "dp_target_epsilon": 8.0})
    assert cfg.privacy.secagg and cfg.privacy.dp_clip == "1.0"


def test_adaptive_clipping_with_secagg_is_refused():
    with pytest.raises(ConfigError, match="adaptive clipping"):
        load_config(None, {"secagg": True, "dp_noise_multiplier": 1.0, "dp_clip": "adaptive"})


def test_the_cli_flags_set_exactly_the_privacy_config_fields():
    """Every PrivacySettings field has a flag (the CLI reads each with getattr), and no flag sets anything else."""
    import argparse

    from fedort.cli.privacy_flags import add_privacy_flags
    from fedort.coordinator.privacy.config import PRIVACY_KEYS

    parser = argparse.ArgumentParser()
    add_privacy_flags(parser)
    assert set(vars(parser.parse_args([]))) == set(PRIVACY_KEYS)


def test_coordinator_config_refuses_secagg_with_a_cohort_of_one(tmp_path):
    with pytest.raises(ConfigError, match="cohort of >= 2"):
        CoordinatorConfig.from_mapping(dict(artifacts=tmp_path, state_dir=tmp_path, secagg=True, min_clients=1))


def test_a_server_optimizer_with_privacy_is_refused_with_the_reason(tmp_path):
    from fedort.coordinator.config import CoordinatorConfig
    from fedort.common.errors import ConfigError

    with pytest.raises(ConfigError, match="does not compose with central DP"):
        CoordinatorConfig.from_mapping(dict(artifacts=tmp_path, state_dir=tmp_path / "s", dp_noise_multiplier=1.0, dp_clip="1.0",
                          server_optimizer="fedadam"))
