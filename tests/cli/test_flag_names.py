"""One flag per config key, by one rule, and the renamed spellings that keep working for one release."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from fedort.cli import coordinator as coordinator_cli
from fedort.cli import data as data_cli
from fedort.cli import edge as edge_cli
from fedort.cli import simulate as simulate_cli
from fedort.common.settings.options import flag_name
from fedort.coordinator.config import CoordinatorConfig

SERVE = ("serve", "--artifacts", "a", "--state-dir", "s")


def parse(module, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.register(parser.add_subparsers())
    return parser.parse_args(list(argv))


def serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    coordinator_cli.register(parser.add_subparsers())
    return parser


def _option_strings(parser: argparse.ArgumentParser, *path: str) -> dict[str, str]:
    """{flag: dest} of the (sub)parser at `path`, hidden ones included."""
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return {s: a.dest for a in parser._actions for s in a.option_strings}


def test_every_coordinator_key_has_the_flag_the_rule_derives_and_it_sets_that_key():
    flags = _option_strings(serve_parser(), "coordinator", "serve")
    for o in CoordinatorConfig.options():
        assert flags.get(flag_name(o.key)) == o.key, o.key


def test_every_simulation_key_has_the_flag_the_rule_derives():
    from fedort.simulations.config import SimulationConfig

    parser = argparse.ArgumentParser()
    simulate_cli.register(parser.add_subparsers())
    flags = _option_strings(parser, "simulate")
    own = [f.name for f in dataclasses.fields(SimulationConfig) if f.name not in ("privacy", "fedbuff")]
    missing = [k for k in own if flags.get(flag_name(k)) != k]
    assert not missing


def test_a_renamed_serve_flag_still_sets_its_key_and_warns_naming_the_new_flag(capsys):
    config = coordinator_cli.config_from_args(parse(coordinator_cli, "coordinator", *SERVE, "--round-timeout", "7"))
    assert config.plan.round_timeout_s == 7.0
    err = capsys.readouterr().err
    assert "--round-timeout is deprecated" in err and "use --round-timeout-s" in err


def test_the_renamed_codec_flag_sets_the_codecs_key(capsys):
    config = coordinator_cli.config_from_args(parse(coordinator_cli, "coordinator", *SERVE, "--codec", "raw,int8"))
    assert config.uploads.codecs == ("raw", "int8")
    assert "use --codecs" in capsys.readouterr().err


def test_the_renamed_repeatable_cors_flag_still_collects_every_origin(capsys):
    args = parse(
        coordinator_cli, "coordinator", *SERVE, "--web-cors-origin", "https://a", "--web-cors-origin", "https://b"
    )
    assert coordinator_cli.config_from_args(args).transport.web_cors_origins == ("https://a", "https://b")
    assert "use --web-cors-origins" in capsys.readouterr().err


def test_the_new_spelling_says_nothing_on_stderr(capsys):
    config = coordinator_cli.config_from_args(parse(coordinator_cli, "coordinator", *SERVE, "--round-timeout-s", "7"))
    assert config.plan.round_timeout_s == 7.0 and capsys.readouterr().err == ""


def test_a_boolean_key_has_a_flag_and_its_negation(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('[coordinator]\nartifacts = "a"\nstate_dir = "s"\n[coordinator.training]\nreset_optimizer = false\n')
    args = parse(coordinator_cli, "coordinator", "serve", "--config", str(toml))
    assert coordinator_cli.config_from_args(args).training.reset_optimizer is False
    args = parse(coordinator_cli, "coordinator", "serve", "--config", str(toml), "--reset-optimizer")
    assert coordinator_cli.config_from_args(args).training.reset_optimizer is True
    args = parse(coordinator_cli, "coordinator", *SERVE, "--no-reset-optimizer")
    assert coordinator_cli.config_from_args(args).training.reset_optimizer is False


def test_renamed_edge_flags_still_set_their_keys_and_warn(capsys):
    args = parse(edge_cli, "edge", "run", "--cert", "c.pem", "--key", "k.pem", "--give-up-after", "5")
    assert (args.cert_file, args.key_file, args.give_up_after_s) == ("c.pem", "k.pem", 5.0)
    err = capsys.readouterr().err
    assert "use --cert-file" in err and "use --key-file" in err and "use --give-up-after-s" in err


def test_the_renamed_edge_key_credential_is_read_as_token_with_a_warning(tmp_path, capsys):
    from fedort.edge_client.client.config import EdgeConfig

    toml = tmp_path / "edge.toml"
    toml.write_text('[edge]\ncoordinator = "127.0.0.1:7420"\ninsecure = true\ncredential = "secret"\n')
    assert EdgeConfig.load(toml).token == "secret"
    err = capsys.readouterr().err
    assert "'credential' is deprecated" in err and "use 'token'" in err


def test_the_new_edge_key_token_wins_over_the_old_one(tmp_path, capsys):
    from fedort.edge_client.client.config import EdgeConfig

    toml = tmp_path / "edge.toml"
    toml.write_text('[edge]\ncoordinator = "127.0.0.1:7420"\ninsecure = true\ncredential = "old"\ntoken = "new"\n')
    assert EdgeConfig.load(toml).token == "new"


def test_the_renamed_data_flag_min_size_sets_min_partition_size(capsys):
    args = parse(data_cli, "data", "digits", "--out", "d", "--min-size", "3")
    assert args.min_partition_size == 3
    assert "use --min-partition-size" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["rounds", "fraction", "seed", "local_epochs", "prox_mu", "strategy", "export_every"])
def test_serve_and_simulate_share_the_default_of_a_key_that_means_the_same(key):
    from fedort.simulations.config import SimulationConfig

    coordinator = {o.key: o.default for o in CoordinatorConfig.options()}
    simulation = SimulationConfig()
    if key == "rounds":  # the stated exception (README "Where serve, simulate and data differ")
        assert (coordinator[key], simulation.rounds) == (3, 30)
    else:
        assert coordinator[key] == getattr(simulation, key)


def test_data_digits_takes_the_simulations_flags_and_defaults_but_an_iid_partition():
    from fedort.simulations.config import SimulationConfig

    args = parse(data_cli, "data", "digits", "--out", "d")
    simulation = SimulationConfig()
    for key in ("clients", "seed", "test_fraction", "min_partition_size"):
        assert getattr(args, key) == getattr(simulation, key), key
    assert (args.partition, simulation.partition) == ("iid", "dirichlet:0.5")  # stated in README


def test_every_edge_key_with_a_flag_has_the_flag_the_rule_derives():
    from fedort.common.settings.options import options
    from fedort.edge_client.client.config import EdgeConfig

    parser = argparse.ArgumentParser()
    edge_cli.register(parser.add_subparsers())
    flags = _option_strings(parser, "edge", "run")
    assert [o.key for o in options(EdgeConfig) if o.flag and flags.get(flag_name(o.key)) != o.key] == []
