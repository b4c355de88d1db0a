"""Per-round export cost at 5 M values: `Exporter.export` of ROUNDS committed vectors (each written to
vectors/round-N.f32 as the commit does), wall and CPU per export, excluding the first (ORT + learning).

    python benchmarks/bench_export.py [--params 5000000] [--rounds 10]
    python benchmarks/ab_base.py --base main --runs 4 --grep export -- bench_export.py
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_round_overhead import WORK, hidden_for


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=int, default=5_000_000)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    from fedort.coordinator.export.inference import Exporter
    from fedort.common.durable import atomic_write, drop_cached
    from fedort.ort.artifacts import build_artifacts
    from fedort.ort.models import mlp

    hidden = hidden_for(args.params)
    art = WORK / f"artifacts-h{hidden}"
    if not (art / "manifest.json").exists():
        build_artifacts(mlp(hidden=hidden), art)
    takes_file = "vector_file" in inspect.signature(Exporter.export).parameters
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        exporter = Exporter(art, Path(tmp) / "models")
        base = exporter.initial_vector()
        walls, cpus = [], []
        for r in range(1, args.rounds + 2):
            vector = base + np.float32(r * 1e-3)
            vector_file = Path(tmp) / "vectors" / f"round-{r + 1:04d}.f32"
            atomic_write(vector_file, vector)
            t0, c0 = time.perf_counter(), time.process_time()
            path = exporter.export(r, vector, {}, **({"vector_file": vector_file} if takes_file else {}))
            drop_cached(path)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        print(f"export P={base.size:,} ({'external' if takes_file else 'inline'} API): median per export "
              f"{1000 * statistics.median(walls[1:]):.1f} ms wall, {1000 * statistics.median(cpus[1:]):.1f} ms CPU "
              f"(rounds 2..{args.rounds + 1}; the first, through ORT: {1000 * walls[0]:.0f} ms)")


if __name__ == "__main__":
    main()
