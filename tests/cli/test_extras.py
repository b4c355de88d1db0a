"""A command whose optional extra is missing says so in one line, naming the extra, before any work.

Each test runs `fedort` in a subprocess whose interpreter has the extra's packages blocked
(`sys.modules[name] = None`: import and find_spec then fail as if they were not installed).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_RUN = ("import sys\n"
        "for name in sys.argv[1].split(','): sys.modules[name] = None\n"
        "from fedort.cli import main\n"
        "sys.exit(main(sys.argv[2:]))\n")


def _fedort_without(blocked: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _RUN, blocked, *args], capture_output=True, text=True, timeout=120)


def test_simulate_without_the_sim_extra_names_it_in_one_line_and_writes_nothing(tmp_path):
    done = _fedort_without("sklearn,matplotlib", "simulate", "digits_dirichlet", "--out", str(tmp_path / "run"))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "fedort: error: fedort simulate (data sets and the plot) needs scikit-learn and matplotlib, which are not "
        "installed: pip install 'fedort[sim]'"]
    assert not (tmp_path / "run").exists()


def test_simulate_without_matplotlib_alone_is_refused_before_any_round(tmp_path):
    done = _fedort_without("matplotlib", "simulate", "--rounds", "1", "--out", str(tmp_path / "run"))
    assert done.returncode == 1 and "needs matplotlib, which is not installed: pip install 'fedort[sim]'" in done.stderr
    assert not (tmp_path / "run").exists()


def test_data_digits_without_scikit_learn_names_the_sim_extra(tmp_path):
    done = _fedort_without("sklearn", "data", "digits", "--clients", "2", "--out", str(tmp_path / "data"))
    assert done.returncode == 1
    assert done.stderr.strip().endswith("needs scikit-learn, which is not installed: pip install 'fedort[sim]'")
    assert "Traceback" not in done.stderr and not (tmp_path / "data").exists()


def test_artifacts_build_torch_without_torch_names_the_torch_extra(tmp_path):
    (tmp_path / "net.py").write_text("def make():\n    raise AssertionError('never called')\n")
    done = _fedort_without("torch", "artifacts", "build", "--torch", f"{tmp_path / 'net.py'}:make",
                           "--out", str(tmp_path / "art"))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "fedort: error: fedort artifacts build --torch needs torch, which is not installed: pip install 'fedort[torch]'"]


@pytest.mark.parametrize("command", [["coordinator", "--help"], ["edge", "--help"], ["artifacts", "--help"]])
def test_commands_that_need_no_extra_work_without_any(command):
    done = _fedort_without("sklearn,matplotlib,ray,torch", *command)
    assert done.returncode == 0, done.stderr
