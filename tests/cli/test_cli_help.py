"""Help texts that say what each option does and defaults to."""

from __future__ import annotations

import pytest

from fedort.cli import main


def _help(capsys, *command: str) -> str:
    with pytest.raises(SystemExit) as e:
        main([*command, "--help"])
    assert e.value.code == 0
    return " ".join(capsys.readouterr().out.split())   # argparse wraps lines: compare word by word


def test_dp_clip_help_says_it_is_off_by_default(capsys):
    text = _help(capsys, "simulate")
    assert "adaptive toward quantile Q (Q defaults to 0.5) (default off)" in text


def test_builtin_help_gives_each_models_input_width(capsys):
    text = _help(capsys, "artifacts", "build")
    assert "mlp and cnn for the digits data (F = 64), logreg for Synthetic(alpha, beta) (F = 60)" in text


def test_artifacts_build_help_offers_a_pytorch_module(capsys):
    assert "--torch FILE.py:FACTORY" in _help(capsys, "artifacts", "build")


def test_serve_help_documents_the_done_grace(capsys):
    assert "--done-grace-s S" in _help(capsys, "coordinator", "serve")


def test_serve_help_groups_the_flags_by_config_section(capsys):
    text = _help(capsys, "coordinator", "serve")
    assert "[uploads] receiving updates" in text and "[privacy] privacy" in text
    assert text.index("[plan]") < text.index("--round-timeout-s S round deadline") < text.index("[training]")


def test_renamed_flags_are_hidden_from_help(capsys):
    text = _help(capsys, "coordinator", "serve")
    assert "--round-timeout-s" in text and "--round-timeout " not in text and "--codec " not in text
