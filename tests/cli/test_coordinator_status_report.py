"""`fedort coordinator status` shows each round's server-side evaluation, and stops quietly when its reader does."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fedort.simulations.config import SimulationConfig
from fedort.simulations.runner import run_simulation

CLI = [sys.executable, "-m", "fedort", "coordinator", "status", "--state-dir"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished two-round run whose coordinator evaluated every round on the held-out digits."""
    return run_simulation(SimulationConfig(clients=3, rounds=2, partition="iid", progress=False, workers=1,
                                           out=tmp_path_factory.mktemp("sim") / "run"))


@pytest.mark.slow
def test_status_shows_the_latest_server_side_evaluation(run):
    out = subprocess.run([*CLI, str(run.out / "state")], capture_output=True, text=True, timeout=60, check=True).stdout
    line = next(line for line in out.splitlines() if line.startswith("evaluated"))
    assert line.startswith(f"evaluated  round 2: accuracy {100 * run.records[-1].accuracy:.2f} %")
    assert "server_accuracy=" in out


@pytest.mark.slow
def test_status_json_has_each_rounds_server_evaluation(run):
    out = subprocess.run([*CLI, str(run.out / "state"), "--json"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    rounds = json.loads(out)["rounds"]
    assert [r["metrics"]["server_accuracy"] for r in rounds] == pytest.approx([r.accuracy for r in run.records])
    assert [r["metrics"]["server_loss"] for r in rounds] == pytest.approx([r.loss for r in run.records])


@pytest.mark.slow
def test_status_into_a_pipe_closed_early_ends_without_a_traceback(run):
    # `| head -1`: the reader takes one line and closes the pipe while the status is still being written
    pipeline = subprocess.run(f"'{sys.executable}' -m fedort coordinator status --state-dir '{run.out / 'state'}' "
                              "--watch 0.01 | head -1", shell=True, capture_output=True, text=True, timeout=60)
    assert pipeline.stdout.startswith("model")
    assert "BrokenPipeError" not in pipeline.stderr and "Traceback" not in pipeline.stderr, pipeline.stderr


@pytest.mark.slow
def test_no_client_is_shown_active_once_the_run_is_done(run):
    status = json.loads(subprocess.run([*CLI, str(run.out / "state"), "--json"], capture_output=True, text=True,
                                       timeout=60, check=True).stdout)
    assert status["state"] == "DONE" and status["registered_clients"] == 3 and status["active_clients"] == 0
