"""Regenerate the Python stubs from `protos/fedort_v1.proto`: `python -m fedort.protos.generate`.

Run from anywhere; writes `fedort_v1_pb2.py`, `fedort_v1_pb2.pyi`, `fedort_v1_pb2_grpc.py` and
`fedort_v1_connect.py` (the Connect service of the web port, protoc-gen-connect-python
CONNECT_PLUGIN; it imports `connectrpc`, the `fedort[web]` extra) into `protos/stubs/` (or into `--out`,
which the staleness test uses to compare).

The stubs are generated with grpcio-tools GRPCIO_TOOLS exactly (protoc 25.x: protobuf 4.25
gencode). Such stubs carry no runtime-version check and import with every protobuf from 4.25 to
7.x and every grpcio from 1.62 on, so fedort can share an environment with packages that pin an
older protobuf. grpcio-tools 1.62 itself needs protobuf < 5, so it does not go into fedort's own
environment: when the installed grpcio-tools is not that version, the generator runs it in a
throwaway environment made by `uv` (`pip install uv`) from the package registry.

Each stub ends with a stamp line, the sha256 of the .proto it was generated from (`STAMP`), so a test
tells offline that the stubs are stale when the .proto changed without regenerating them.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROTO = "fedort_v1.proto"
HERE = Path(__file__).resolve().parent
OUTPUTS = ("fedort_v1_pb2.py", "fedort_v1_pb2.pyi", "fedort_v1_pb2_grpc.py", "fedort_v1_connect.py")
GRPCIO_TOOLS = "1.62.3"
CONNECT_PLUGIN = "0.9.0"  # protoc-gen-connect-python, matching the connect-python runtime of fedort[web]
STAMP = "# generated from fedort_v1.proto, sha256 "


def proto_sha256(proto: Path = HERE / PROTO) -> str:
    """The hex sha256 of the .proto's bytes (what the stubs' stamp line records)."""
    return hashlib.sha256(proto.read_bytes()).hexdigest()


def stamped_sha256(stub: Path) -> str | None:
    """The .proto sha256 a generated stub records in its last line, or None if it has no stamp."""
    lines = stub.read_text().splitlines()
    return lines[-1][len(STAMP) :].strip() if lines and lines[-1].startswith(STAMP) else None


def _installed_tools_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("grpcio-tools")
    except Exception:  # noqa: BLE001 - not installed
        return None


def _protoc(args: list[str]) -> int:
    """protoc of grpcio-tools GRPCIO_TOOLS with protoc-gen-connect-python CONNECT_PLUGIN, through `uv run --with`."""
    uv = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if uv is None:
        raise SystemExit(
            f"the stubs are generated with grpcio-tools=={GRPCIO_TOOLS} and protoc-gen-connect-python=="
            f"{CONNECT_PLUGIN}; install `uv` (pip install uv) so the generator can run them in a "
            "throwaway environment"
        )
    cmd = [
        uv,
        "run",
        "--isolated",
        "--no-project",
        "--quiet",
        "--python",
        sys.executable,
        "--with",
        f"grpcio-tools=={GRPCIO_TOOLS}",
        "--with",
        f"protoc-gen-connect-python=={CONNECT_PLUGIN}",
        "--",
        "python",
        "-m",
        "grpc_tools.protoc",
        *args[1:],
    ]
    return subprocess.run(cmd).returncode


def generate(out_dir: Path) -> list[Path]:
    """Run protoc (from grpcio-tools GRPCIO_TOOLS) and place the stubs in `out_dir/`."""
    with tempfile.TemporaryDirectory() as tmp:
        # The .proto sits at `fedort/protos/stubs/` in the include tree so the generated stubs import
        # each other as `fedort.protos.stubs.*`, the name they are installed under.
        src = Path(tmp) / "src"
        (src / "fedort" / "protos" / "stubs").mkdir(parents=True)
        shutil.copyfile(HERE / PROTO, src / "fedort" / "protos" / "stubs" / PROTO)
        args = [
            "protoc",
            f"-I{src}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            f"--connect-python_out={tmp}",
            str(Path("fedort") / "protos" / "stubs" / PROTO),
        ]
        if _protoc(args) != 0:
            raise SystemExit("protoc failed")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        stamp = f"{STAMP}{proto_sha256()}\n"
        for name in OUTPUTS:
            text = (Path(tmp) / "fedort" / "protos" / "stubs" / name).read_text()
            (out_dir / name).write_text(text + ("" if text.endswith("\n") else "\n") + stamp)
            written.append(out_dir / name)
        return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=HERE / "stubs", help="where to write the stubs (default: protos/stubs/)"
    )
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
