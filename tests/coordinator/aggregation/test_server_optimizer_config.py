"""`--server-optimizer` / `server_optimizer` on `coordinator serve` and `simulate`: parsed, validated,
recorded canonically; every optimizer is accepted now that the round engine applies it."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from fedort.cli import coordinator as coordinator_cli
from fedort.cli import simulate as simulate_cli
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.settings import AggregationSettings
from fedort.common.errors import ConfigError
from fedort.simulations.config import load_config


def parse(module, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers())
    return parser.parse_args(list(argv))


def test_the_default_is_fedavg_and_is_recorded_with_the_training_config():
    config = CoordinatorConfig(artifacts=Path("a"), state_dir=Path("s"))
    assert config.aggregation.server_optimizer == "fedavg"
    assert config.training_json()["server_optimizer"] == "fedavg"


def test_serve_flag_overrides_the_toml_file_and_is_recorded_canonically(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('[coordinator]\nartifacts = "a"\nstate_dir = "s"\nserver_optimizer = "fedyogi"\n')
    args = parse(coordinator_cli, "coordinator", "serve", "--config", str(toml), "--server-optimizer", "fedadam:lr=0.1")
    config = coordinator_cli.config_from_args(args)
    assert config.aggregation.server_optimizer == "fedadam:lr=0.1"
    assert config.training_json()["server_optimizer"] == "fedadam:lr=0.1,beta1=0.9,beta2=0.99,tau=0.001,bias_correction=flower"


def test_a_bad_spec_is_a_config_error_at_load():
    args = parse(coordinator_cli, "coordinator", "serve", "--artifacts", "a", "--state-dir", "s",
                 "--server-optimizer", "fedadam:beta1=1")
    with pytest.raises(ConfigError, match=r"beta1 must be a number in \[0, 1\), got 1.0"):
        coordinator_cli.config_from_args(args)


def test_every_optimizer_is_accepted_by_serve_and_simulate_configs():
    for name in ("fedavgm", "fedadagrad", "fedadam", "fedyogi"):
        config = CoordinatorConfig(artifacts=Path("a"), state_dir=Path("s"), aggregation=AggregationSettings(server_optimizer=name))
        assert config.aggregation.server_optimizer == name
        assert load_config(None, {"server_optimizer": name}).server_optimizer == name


def test_simulate_takes_the_flag_into_its_config(tmp_path):
    args = parse(simulate_cli, "simulate", "--server-optimizer", "fedavgm:momentum=0.5", "--out", str(tmp_path))
    assert args.server_optimizer == "fedavgm:momentum=0.5"
    assert load_config(None, {"server_optimizer": args.server_optimizer}).server_optimizer == "fedavgm:momentum=0.5"


def test_simulate_with_a_bad_spec_exits_1_with_the_reason(tmp_path):
    exe = Path(sys.executable).with_name("fedort")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fedort"]
    result = subprocess.run(cmd + ["simulate", "--server-optimizer", "fedsgd", "--out", str(tmp_path / "run")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "unknown server optimizer 'fedsgd'" in result.stderr
    assert not (tmp_path / "run").exists()
