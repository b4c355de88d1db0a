"""A separate virtualenv with Flower (flwr) for the benchmarks that compare against it.

Flower pins `protobuf<7` while fedort's generated stubs need protobuf 7, so flwr cannot live in
the project's .venv. Benchmarks that need it re-run themselves under this venv's Python; they
import only fedort modules that do not load the stubs (e.g. coordinator.aggregation.weighted_sum, which needs
numpy and protos.errors -> grpc), by putting the repository root on sys.path — fedort itself is
not installed there. `run_trial` runs a generated trial script there with benchmarks/ on its path
(for flower_echo.py, the no-work client and timed FedAvg).

    python benchmarks/flower_venv.py            # create or update benchmarks/.work/venv-flwr
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "benchmarks" / ".work" / "venv-flwr"
# zstandard: bench_aggregation loads fedort's fold by path, and it imports fedort.protos.update_codecs
REQUIREMENTS = ["flwr>=1.10,<2", "numpy>=1.26", "threadpoolctl", "zstandard>=0.22"]
REEXEC_MARK = "FEDORT_BENCH_IN_FLOWER_VENV"


def python() -> Path:
    return VENV / "bin" / "python"


def ensure(quiet: bool = True, extra: tuple[str, ...] = (),
           probe: str = "import flwr, threadpoolctl, zstandard") -> Path:
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


def run_trial(py: Path, script: Path, source: str, args: list, timeout: float) -> dict:
    """Write `source` to `script`, run it with `py` (the Flower venv's python) in the script's folder,
    benchmarks/ its only PYTHONPATH and Ray's log dedup off, and return its `RESULT {json}` line."""
    script.write_text(source)
    env = dict(os.environ, RAY_DEDUP_LOGS="0", RAY_ENABLE_UV_RUN_RUNTIME_ENV="0", PYTHONWARNINGS="ignore",
               PYTHONPATH=str(ROOT / "benchmarks"))
    proc = subprocess.run([str(py), str(script), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=script.parent)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"Flower trial failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


if __name__ == "__main__":
    print(ensure(quiet=False))
