"""The committed stubs are what `python -m fedort.protos.generate` makes from the .proto today.

Offline, every stub's stamp must record the sha256 of the current .proto (a changed .proto without a
regeneration fails here). With grpcio-tools 1.62.3 importable, or FEDORT_REGENERATE_STUBS=1 (which lets
the generator fetch it with `uv` from the package registry), the stubs are regenerated and compared byte
for byte as well."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedort import protos
from fedort.protos.generate import GRPCIO_TOOLS, OUTPUTS, PROTO, proto_sha256, stamped_sha256
from fedort.protos.generate import _installed_tools_version as _tools_version

HERE = Path(protos.__file__).resolve().parent / "stubs"


def test_every_stub_records_the_sha256_of_the_current_proto():
    expected = proto_sha256()
    stamps = {name: stamped_sha256(HERE / name) for name in OUTPUTS}
    stale = [name for name, stamp in stamps.items() if stamp != expected]
    assert not stale, (f"stubs {stale} were generated from another {PROTO} (stamps {stamps}, the .proto's sha256 "
                       f"{expected}): run `make protos` and commit the result")


def test_the_stamp_changes_with_the_proto(tmp_path):
    proto = tmp_path / PROTO
    proto.write_bytes((HERE.parent / PROTO).read_bytes())
    before = proto_sha256(proto)
    proto.write_bytes(proto.read_bytes().replace(b"message VectorRequest {", b"message VectorRequest {\n  // x"))
    assert proto_sha256(proto) != before


@pytest.mark.slow
def test_regenerated_stubs_match_the_committed_ones(tmp_path):
    online = os.environ.get("FEDORT_REGENERATE_STUBS") == "1"
    if _tools_version() != GRPCIO_TOOLS and not online:
        pytest.skip(f"regenerating needs grpcio-tools=={GRPCIO_TOOLS} installed, or FEDORT_REGENERATE_STUBS=1 "
                    "to fetch it with uv (network)")
    if _tools_version() != GRPCIO_TOOLS and shutil.which("uv", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}") is None:
        pytest.skip("FEDORT_REGENERATE_STUBS=1 needs `uv` (dev extra) to fetch grpcio-tools")
    result = subprocess.run([sys.executable, "-m", "fedort.protos.generate", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=300, cwd=HERE.parent.parent)
    assert result.returncode == 0, result.stderr
    stale = [name for name in OUTPUTS if (tmp_path / name).read_bytes() != (HERE / name).read_bytes()]
    assert not stale, f"stubs {stale} are stale: run `make protos` and commit the result"


def test_the_stubs_need_no_newer_protobuf_than_the_declared_minimum():
    """Co-installability: the stubs carry no runtime-version check (protobuf 4.25 gencode)."""
    text = (HERE / "fedort_v1_pb2.py").read_text()
    assert "ValidateProtobufRuntimeVersion" not in text and "Protobuf Python Version: 4.25" in text
    assert "GRPC_GENERATED_VERSION" not in (HERE / "fedort_v1_pb2_grpc.py").read_text()
