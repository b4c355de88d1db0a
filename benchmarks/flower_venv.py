"""A separate virtualenv with Flower (flwr) for the benchmarks that compare against it.

Flower pins `protobuf<7` while fedort's generated stubs need protobuf 7, so flwr cannot live in
the project's .venv. Benchmarks that need it re-run themselves under this venv's Python; they
import only fedort modules that do not load the stubs (e.g. coordinator.aggregation.weighted_sum, which needs
numpy and protos.errors -> grpc), by putting the repository root on sys.path — fedort itself is
not installed there.

    python benchmarks/flower_venv.py            # create or update benchmarks/.work/venv-flwr
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "benchmarks" / ".work" / "venv-flwr"
REQUIREMENTS = ["flwr>=1.10,<2", "numpy>=1.26", "threadpoolctl"]
REEXEC_MARK = "FEDORT_BENCH_IN_FLOWER_VENV"


def python() -> Path:
    return VENV / "bin" / "python"


def ensure(quiet: bool = True, extra: tuple[str, ...] = (), probe: str = "import flwr, threadpoolctl") -> Path:
    """Create the venv and install flwr (+ `extra`, e.g. "flwr[simulation]") unless `probe` already
    runs there; return the venv's python."""
    if not python().exists():
        print(f"creating {VENV} for Flower (protobuf<7 cannot share fedort's .venv)", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(VENV)
    if subprocess.run([str(python()), "-c", probe], capture_output=True).returncode != 0:
        wanted = [*REQUIREMENTS, *extra]
        print(f"installing {' '.join(wanted)} into {VENV}", file=sys.stderr)
        subprocess.run([str(python()), "-m", "pip", "install", *(["--quiet"] if quiet else []), *wanted],
                       check=True)
    return python()


def reexec_under_flower(script: str) -> None:
    """Replace this process with `script` run by the Flower venv's python (same arguments)."""
    if os.environ.get(REEXEC_MARK):
        raise RuntimeError(f"flwr is still not importable under {sys.executable}")
    py = ensure()
    env = dict(os.environ, **{REEXEC_MARK: "1"})
    os.execve(str(py), [str(py), script, *sys.argv[1:]], env)


if __name__ == "__main__":
    print(ensure(quiet=False))
