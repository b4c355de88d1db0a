"""The committed stubs are exactly what `python -m fedort.protos.generate` makes from the .proto today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedort import protos
from fedort.protos.generate import OUTPUTS

HERE = Path(protos.__file__).resolve().parent


def test_generated_stubs_match_the_proto(tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools (dev extra) regenerates the stubs")
    result = subprocess.run([sys.executable, "-m", "fedort.protos.generate", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=60, cwd=HERE.parent)
    assert result.returncode == 0, result.stderr
    stale = [name for name in OUTPUTS if (tmp_path / name).read_bytes() != (HERE / name).read_bytes()]
    assert not stale, f"stubs {stale} are stale: run `python -m fedort.protos.generate` and commit the result"
