"""CoordinatorConfig is composed of typed sections: how files, mappings and code build it, and what each refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedort.common.errors import ConfigError
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.settings import SECTIONS, PlanSettings, TransportSettings, UploadSettings

BASE = {"artifacts": "a", "state_dir": "s"}


def test_a_toml_section_table_sets_the_keys_of_its_section(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text(
        '[coordinator]\nartifacts = "a"\nstate_dir = "s"\n'
        "[coordinator.plan]\nrounds = 7\nround_timeout_s = 12.5\n"
        "[coordinator.uploads]\nmax_concurrent_uploads = 3\n"
    )
    config = CoordinatorConfig.load(toml)
    assert (config.plan.rounds, config.plan.round_timeout_s) == (7, 12.5)
    assert config.uploads.max_concurrent_uploads == 3


def test_flat_keys_in_the_coordinator_table_give_the_same_config_as_section_tables(tmp_path):
    flat, sectioned = tmp_path / "flat.toml", tmp_path / "sectioned.toml"
    flat.write_text('[coordinator]\nartifacts = "a"\nstate_dir = "s"\nrounds = 7\nlr = 0.2\ninsecure = true\n')
    sectioned.write_text(
        '[coordinator]\nartifacts = "a"\nstate_dir = "s"\n[coordinator.plan]\nrounds = 7\n'
        "[coordinator.training]\nlr = 0.2\n[coordinator.transport]\ninsecure = true\n"
    )
    assert CoordinatorConfig.load(flat) == CoordinatorConfig.load(sectioned)


def test_relative_paths_in_a_section_table_resolve_against_the_file(tmp_path):
    toml = tmp_path / "conf" / "c.toml"
    toml.parent.mkdir()
    toml.write_text('[coordinator]\nartifacts = "a"\nstate_dir = "s"\n[coordinator.export]\neval_data = "test.npz"\n')
    config = CoordinatorConfig.load(toml)
    assert config.export.eval_data == tmp_path / "conf" / "test.npz"
    assert config.artifacts == tmp_path / "conf" / "a"


def test_a_flag_overrides_the_same_key_in_a_section_table(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('[coordinator]\nartifacts = "a"\nstate_dir = "s"\n[coordinator.plan]\nrounds = 7\nseed = 4\n')
    config = CoordinatorConfig.load(toml, rounds=9, seed=None)
    assert (config.plan.rounds, config.plan.seed) == (9, 4)


def test_a_key_in_another_sections_table_is_refused_naming_its_section():
    with pytest.raises(ConfigError, match=r"'lr' belongs in \[coordinator.training\], not \[plan\]"):
        CoordinatorConfig.from_mapping({**BASE, "plan": {"lr": 0.1}})


def test_an_unknown_key_is_refused_with_the_likely_intended_one():
    with pytest.raises(ConfigError, match=r"'round_timeout' \(did you mean 'round_timeout_s'\?\)"):
        CoordinatorConfig.from_mapping({**BASE, "round_timeout": 5})


def test_a_key_given_flat_and_in_its_table_is_refused():
    with pytest.raises(ConfigError, match="'rounds' is given twice"):
        CoordinatorConfig.from_mapping({**BASE, "rounds": 2, "plan": {"rounds": 3}})


def test_a_section_checks_its_own_fields_saying_what_it_expected_and_got():
    with pytest.raises(ConfigError, match="rounds must be an integer >= 1, got 0"):
        PlanSettings(rounds=0)
    with pytest.raises(ConfigError, match="address must be HOST:PORT with a port in 0..65535, got 'host:99999'"):
        TransportSettings(address="host:99999")
    with pytest.raises(ConfigError, match="max_concurrent_uploads must be an integer >= 1, got 0"):
        UploadSettings(max_concurrent_uploads=0)


def test_checks_across_sections_run_when_the_config_is_composed():
    from fedort.coordinator.fedbuff.config import FedBuffSettings
    from fedort.coordinator.settings import AggregationSettings

    with pytest.raises(ConfigError, match="mode 'async' .* strategy must be 'fedavg', got 'median'"):
        CoordinatorConfig(
            artifacts=Path("a"),
            state_dir=Path("s"),
            fedbuff=FedBuffSettings(mode="async"),
            aggregation=AggregationSettings(strategy="median"),
        )


def test_replace_takes_flat_keys_and_checks_the_result_again():
    config = CoordinatorConfig.from_mapping(BASE)
    changed = config.replace(rounds=5, secagg=True)
    assert (changed.plan.rounds, changed.privacy.secagg, config.plan.rounds) == (5, True, 3)
    with pytest.raises(ConfigError, match="min_clients must be >= 2 with --secagg"):
        config.replace(min_clients=1, min_available_clients=1, secagg=True)


def test_list_settings_take_a_comma_separated_string_or_a_list():
    a = CoordinatorConfig.from_mapping({**BASE, "codecs": "raw, int8", "web_cors_origins": ["https://x"]})
    assert a.uploads.codecs == ("raw", "int8") and a.transport.web_cors_origins == ("https://x",)


def test_the_recorded_json_is_flat_with_every_key_once():
    record = CoordinatorConfig.from_mapping({**BASE, "rounds": 4}).to_json_dict()
    keys = [o.key for o in CoordinatorConfig.options()]
    assert set(record) == {*keys, "extra"} and record["rounds"] == 4 and record["artifacts"] == "a"


def test_keys_are_unique_across_sections_and_no_key_is_named_like_a_section():
    keys = [o.key for o in CoordinatorConfig.options()]
    assert len(keys) == len(set(keys))
    assert not set(keys) & set(SECTIONS)
