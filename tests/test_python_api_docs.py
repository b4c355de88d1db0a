"""docs/python-api.md is true: its worked example runs as written, and `fedort.__all__` is the public API."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fedort

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"


def _blocks(section: str, lang: str) -> list[str]:
    text = DOC.read_text()
    body = text[text.index(f"## {section}"):]
    end = body.find("\n## ", 4)
    body = body if end < 0 else body[:end]
    return re.findall(rf"```{lang}\n(.*?)```", body, flags=re.S)


@pytest.mark.slow
def test_the_custom_strategy_example_runs_a_federation_as_written(tmp_path):
    (setup,) = _blocks("A custom strategy from the pipeline's stages", "sh")
    (script,) = _blocks("A custom strategy from the pipeline's stages", "python")
    for line in setup.strip().splitlines():
        done = subprocess.run([sys.executable, "-m", "fedort", *line.split()[1:]], cwd=tmp_path, capture_output=True,
                              text=True, timeout=180)
        assert done.returncode == 0, done.stderr
    (tmp_path / "example.py").write_text(script)
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "5 rounds; latest model" in done.stdout
    record = json.loads((tmp_path / "state" / "models" / "round-0005" / "model.json").read_text())
    assert record["server_eval"]["accuracy"] > 0.8
    assert record["metrics"]["server_step_norm"] > 0   # the chain's server update (FedAvgM) ran


def test_every_name_in_fedort_all_is_importable():
    for name in fedort.__all__:
        assert getattr(fedort, name) is not None, name


def test_the_documented_public_names_are_exactly_fedort_all():
    text = DOC.read_text()
    table = text[text.index("## Public names"):text.index("## Embedding a coordinator")]
    rows = [row for row in table.splitlines() if row.startswith("| `")]
    documented = {n for row in rows for n in re.findall(r"`([A-Za-z_]+)`", row.split("|")[1])}
    assert documented == set(fedort.__all__) - {"__version__"}


@pytest.mark.parametrize("name", ["Coordinator", "Strategy", "EdgeClient"])
def test_importing_fedort_loads_nothing_heavy_until_a_name_is_used(name):
    code = (f"import sys, fedort; assert 'grpc' not in sys.modules and 'onnxruntime' not in sys.modules; "
            f"fedort.{name}; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr
