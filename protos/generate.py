"""Regenerate the Python stubs from `protos/fedort_v1.proto`: `python -m fedort.protos.generate`.

Run from anywhere; writes `fedort_v1_pb2.py`, `fedort_v1_pb2.pyi` and `fedort_v1_pb2_grpc.py`
beside the .proto (or into `--out`, which the staleness test uses to compare).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

PROTO = "fedort_v1.proto"
HERE = Path(__file__).resolve().parent
OUTPUTS = ("fedort_v1_pb2.py", "fedort_v1_pb2.pyi", "fedort_v1_pb2_grpc.py")


def generate(out_dir: Path) -> list[Path]:
    """Run protoc (from grpcio-tools) and place the stubs in `out_dir/`."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        # The .proto sits at `fedort/protos/` in the include tree so the generated stubs import
        # each other as `fedort.protos.*`, the name they are installed under.
        src = Path(tmp) / "src"
        (src / "fedort" / "protos").mkdir(parents=True)
        shutil.copyfile(HERE / PROTO, src / "fedort" / "protos" / PROTO)
        args = [
            "protoc", f"-I{src}", f"--python_out={tmp}", f"--pyi_out={tmp}", f"--grpc_python_out={tmp}",
            str(Path("fedort") / "protos" / PROTO),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name in OUTPUTS:
            shutil.copyfile(Path(tmp) / "fedort" / "protos" / name, out_dir / name)
            written.append(out_dir / name)
        return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where to write the stubs (default: protos/)")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
