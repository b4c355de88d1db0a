"""CPU per no-work round: fedort (vectors as files, the default of `fedort simulate`), fedort streaming
every vector over gRPC, and Flower's simulation, at one vector size (5 M float32 values by default).

On a shared machine the wall time of a round depends on how much of the 2 cores the run gets;
the CPU it burns does not. Each side runs the `bench_round_overhead.py` trial (same setup, same
subprocesses) twice, with R1 and R2 rounds; the CPU per round is the difference of the trials' CPU
time (user + system of the trial process and all its reaped descendants: coordinator, workers,
Ray's processes) divided by R2 - R1, so start-up and shutdown cancel out.

    python benchmarks/bench_round_cpu.py                        # files, stream, flower at 5 M, 2 repeats
    python benchmarks/bench_round_cpu.py --sides files stream --size 5000
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_round_overhead as overhead  # noqa: E402


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def trial_cpu(side: str, size: int, rounds: int, py) -> tuple[float, float]:
    """(CPU s, wall s) of one trial subprocess (and everything it started and reaped)."""
    c0, t0 = children_cpu(), time.time()
    if side == "flower":
        overhead.flower_trial(py, overhead.hidden_for(size) * 75 + 10, rounds, 10, 1)
    else:
        overhead.run_fedort(size, rounds, 10, 2, None, stream=side.startswith("stream"),
                            digests="" if side.endswith("-sha256") else None)
    return children_cpu() - c0, time.time() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sides", nargs="+", default=["files", "stream", "flower"], choices=["files", "stream", "flower", "files-sha256", "stream-sha256"],
                    help="-sha256: the coordinator announces no BLAKE3 (update digests as before protocol 1.3)")
    ap.add_argument("--size", type=int, default=5_000_000, help="float32 values (default 5000000)")
    ap.add_argument("--rounds", type=int, nargs=2, default=[4, 10], metavar=("R1", "R2"))
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    overhead.WORK.mkdir(parents=True, exist_ok=True)
    py = None
    if "flower" in args.sides:
        import flower_venv

        py = flower_venv.ensure(extra=("flwr[simulation]",), probe="import flwr, ray")
    r1, r2 = args.rounds
    print(f"# {os.cpu_count()} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}, "
          f"{args.size:,} values, {r1} and {r2} rounds per side")
    for _ in range(args.repeats):
        for side in args.sides:
            (c1, w1), (c2, w2) = (trial_cpu(side, args.size, r, py) for r in (r1, r2))
            print(f"{side:13s} CPU {1000 * (c2 - c1) / (r2 - r1):6.0f} ms per round  (trials: {c1:.1f} s CPU / {w1:.1f} s "
                  f"wall for {r1} rounds, {c2:.1f} s / {w2:.1f} s for {r2})", flush=True)
    print(f"# load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
