"""The committed stubs are exactly what `python -m fedort.protos.generate` makes from the .proto today."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedort import protos
from fedort.protos.generate import GRPCIO_TOOLS, OUTPUTS, _installed_tools_version as _tools_version

HERE = Path(protos.__file__).resolve().parent / "stubs"


def test_generated_stubs_match_the_proto(tmp_path):
    if _tools_version() != GRPCIO_TOOLS and shutil.which("uv", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}") is None:
        pytest.skip(f"regenerating needs grpcio-tools=={GRPCIO_TOOLS} or `uv` (dev extra) to fetch it")
    result = subprocess.run([sys.executable, "-m", "fedort.protos.generate", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=300, cwd=HERE.parent.parent)
    assert result.returncode == 0, result.stderr
    stale = [name for name in OUTPUTS if (tmp_path / name).read_bytes() != (HERE / name).read_bytes()]
    assert not stale, f"stubs {stale} are stale: run `python -m fedort.protos.generate` and commit the result"


def test_the_stubs_need_no_newer_protobuf_than_the_declared_minimum():
    """Co-installability: the stubs carry no runtime-version check (protobuf 4.25 gencode)."""
    text = (HERE / "fedort_v1_pb2.py").read_text()
    assert "ValidateProtobufRuntimeVersion" not in text and "Protobuf Python Version: 4.25" in text
    assert "GRPC_GENERATED_VERSION" not in (HERE / "fedort_v1_pb2_grpc.py").read_text()
