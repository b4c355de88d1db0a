"""What a process of `fedort simulate` imports before it needs it: start-up time of every run (issue 12).

Each check runs in a fresh interpreter, since this test process has long imported everything."""

from __future__ import annotations

import json
import subprocess
import sys
import pytest
from pathlib import Path

SCENARIO = Path(__file__).resolve().parents[2] / "simulations" / "scenarios" / "digits_dirichlet.toml"


def _loaded_after(code: str, modules: list[str]) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {modules!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_simulate_parses_and_checks_its_config_without_loading_the_server_so_workers_spawn_first():
    code = (f"from fedort.cli import build_parser\nargv = ['simulate', {str(SCENARIO)!r}]\n"
            "args = build_parser(argv).parse_args(argv)\n"
            "from fedort.simulations.config import load_config\nload_config(args.scenario, {})\n"
            "import fedort.simulations.workers.backends")
    heavy = ["fedort.coordinator.server", "fedort.coordinator.engine.round_engine", "grpc", "onnxruntime", "onnx",
             "fedort.simulations.workers.worker"]
    assert _loaded_after(code, heavy) == []


@pytest.mark.slow
def test_a_simulation_worker_loads_no_onnx_plotting_or_secure_aggregation_crypto():
    code = "import fedort.simulations.workers.backends as b\nb._warm()"
    assert _loaded_after(code, ["onnxruntime", "fedort.simulations.workers.worker"]) == ["onnxruntime", "fedort.simulations.workers.worker"]
    assert _loaded_after(code, ["onnx", "matplotlib", "cryptography", "torch", "fedort.coordinator"]) == []


@pytest.mark.slow
def test_simulation_workers_are_forked_only_before_grpc_or_onnxruntime_load():
    """A worker forked from a process holding gRPC or ORT state would share it; before those load, fork is safe
    and saves each worker a fresh interpreter's start-up."""
    probe = "from fedort.simulations.workers.backends import _start_method\n"
    fresh = subprocess.run([sys.executable, "-c", probe + "print(_start_method())"],
                           capture_output=True, text=True, timeout=120)
    assert fresh.stdout.strip() == ("fork" if sys.platform.startswith("linux") else "spawn"), fresh.stderr[-2000:]
    for heavy in ("grpc", "onnxruntime"):
        late = subprocess.run([sys.executable, "-c", probe + f"import {heavy}\nprint(_start_method())"],
                              capture_output=True, text=True, timeout=120)
        assert late.stdout.strip() == "spawn", late.stderr[-2000:]


@pytest.mark.slow
def test_a_forked_worker_logs_like_a_spawned_one():
    code = ("import logging, sys\nlogging.getLogger().addHandler(logging.StreamHandler(sys.stdout))\n"
            "logging.getLogger().setLevel(logging.DEBUG)\n"
            "import fedort.simulations.workers.backends as b\nb._warm()\nroot = logging.getLogger()\n"
            "print(len(root.handlers), logging.getLevelName(root.level))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "0 WARNING", done.stderr[-2000:]


@pytest.mark.slow
def test_a_synchronous_run_loads_no_fedbuff_engine_and_without_a_bar_no_tqdm():
    code = ("import fedort.simulations.runner\nfrom fedort.coordinator.state.layout import StateLayout\n"
            "from fedort.simulations.progress import RoundProgress\n"
            "RoundProgress(StateLayout('/nonexistent'), 3, enabled=False).update()")
    assert _loaded_after(code, ["fedort.coordinator.fedbuff.engine", "fedort.coordinator.fedbuff.buffer", "tqdm", "onnx",
                                "matplotlib"]) == []
