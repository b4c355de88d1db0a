"""A simulation holds the coordinator's own privacy and FedBuff sections: same types, same keys, handed over as they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedort.common.errors import ConfigError
from fedort.coordinator.fedbuff.config import FedBuffSettings
from fedort.coordinator.privacy.config import PrivacySettings
from fedort.simulations.config import SimulationConfig, load_config
from fedort.simulations.coordinator_settings import coordinator_config


def test_flat_section_keys_and_section_tables_in_a_scenario_build_the_same_sections(tmp_path):
    flat, tables = tmp_path / "flat.toml", tmp_path / "tables.toml"
    flat.write_text('clients = 4\nsecagg = true\ndp_clip = "1.0"\nmode = "async"\nbuffer_size = 3\n')
    tables.write_text('clients = 4\n[privacy]\nsecagg = true\ndp_clip = "1.0"\n[fedbuff]\nmode = "async"\nbuffer_size = 3\n')
    a, b = load_config(flat), load_config(tables)
    assert a.privacy == b.privacy == PrivacySettings(secagg=True, dp_clip="1.0")
    assert a.fedbuff == b.fedbuff == FedBuffSettings(mode="async", buffer_size=3)


def test_the_simulated_coordinator_gets_the_simulations_sections_unchanged(tmp_path):
    cfg = SimulationConfig.from_mapping({"clients": 4, "secagg": True, "dp_clip": "1.0", "dp_noise_multiplier": 0.5})
    coordinator = coordinator_config(cfg, Path("art"), tmp_path / "state", None, 4)
    assert coordinator.privacy is cfg.privacy and coordinator.fedbuff is cfg.fedbuff


def test_a_section_problem_in_a_simulation_names_the_key_and_the_value():
    with pytest.raises(ConfigError, match="dp_delta must be in \\(0, 1\\), got 2"):
        SimulationConfig.from_mapping({"dp_delta": 2})
    with pytest.raises(ConfigError, match="buffer_size must be an integer in 1..clients \\(4\\)"):
        SimulationConfig.from_mapping({"clients": 4, "mode": "async", "buffer_size": 5})


def test_the_recorded_simulation_config_is_flat():
    record = SimulationConfig.from_mapping({"secagg": True}).to_dict()
    assert record["secagg"] is True and record["mode"] == "sync" and "privacy" not in record
