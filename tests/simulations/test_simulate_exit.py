"""`fedort simulate` ends its process without the interpreter's teardown, but only after every output
is written: the report it prints, the metrics, the plot and the model are all complete."""

from __future__ import annotations

import csv
import subprocess
import sys

import onnxruntime as ort
import pytest


@pytest.mark.slow
def test_the_simulate_command_exits_with_every_output_complete_and_its_report_printed(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "fedort", "simulate", "--clients", "2", "--rounds", "2",
                           "--no-progress", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.rstrip().splitlines()[-1].startswith("model:")      # stdout flushed before leaving
    with open(out / "metrics.csv", newline="") as f:
        assert [row["round"] for row in csv.DictReader(f)] == ["1", "2"]
    assert (out / "metrics.png").read_bytes().startswith(b"\x89PNG")
    ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
