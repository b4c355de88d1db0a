"""`--server-optimizer` / `server_optimizer` on `coordinator serve` and `simulate`: parsed, validated,
recorded canonically; refused (clearly) for anything but fedavg until the engine applies it."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from fedort.cli import coordinator as coordinator_cli
from fedort.cli import simulate as simulate_cli
from fedort.coordinator import server_optimizers
from fedort.coordinator.config import CoordinatorConfig
from fedort.protos.errors import ConfigError
from fedort.simulations.config import load_config


@pytest.fixture
def engine_applies(monkeypatch):
    """As after integration: the round engine runs the server-update stage."""
    monkeypatch.setattr(server_optimizers, "ENGINE_APPLIES_SERVER_OPTIMIZER", True)


def parse(module, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers())
    return parser.parse_args(list(argv))


def test_the_default_is_fedavg_and_is_recorded_with_the_training_config():
    config = CoordinatorConfig(artifacts=Path("a"), state_dir=Path("s"))
    assert config.server_optimizer == "fedavg"
    assert config.training_json()["server_optimizer"] == "fedavg"


def test_serve_flag_overrides_the_toml_file_and_is_recorded_canonically(tmp_path, engine_applies):
    toml = tmp_path / "c.toml"
    toml.write_text('[coordinator]\nartifacts = "a"\nstate_dir = "s"\nserver_optimizer = "fedyogi"\n')
    args = parse(coordinator_cli, "coordinator", "serve", "--config", str(toml), "--server-optimizer", "fedadam:lr=0.1")
    config = coordinator_cli.config_from_args(args)
    assert config.server_optimizer == "fedadam:lr=0.1"
    assert config.training_json()["server_optimizer"] == "fedadam:lr=0.1,beta1=0.9,beta2=0.99,tau=0.001,bias_correction=none"


def test_a_bad_spec_is_a_config_error_at_load(engine_applies):
    args = parse(coordinator_cli, "coordinator", "serve", "--artifacts", "a", "--state-dir", "s",
                 "--server-optimizer", "fedadam:beta1=1")
    with pytest.raises(ConfigError, match=r"beta1 must be a number in \[0, 1\), got 1.0"):
        coordinator_cli.config_from_args(args)


def test_other_optimizers_are_refused_while_the_engine_does_not_apply_them():
    with pytest.raises(ConfigError, match="'fedavgm:lr=1.0,momentum=0.9' is not applied by this coordinator's round "
                                          "engine yet"):
        CoordinatorConfig(artifacts=Path("a"), state_dir=Path("s"), server_optimizer="fedavgm")
    with pytest.raises(ConfigError, match="not applied by this coordinator's round engine yet"):
        load_config(None, {"server_optimizer": "fedadam"})


def test_simulate_takes_the_flag_into_its_config(engine_applies, tmp_path):
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
