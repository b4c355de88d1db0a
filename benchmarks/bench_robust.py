"""Robust aggregation under Byzantine clients: accuracy on digits, and aggregation time per round.

Accuracy: `run_simulation` (real coordinator, real edge clients in worker processes) on digits,
10 clients, IID, MLP, 1 local epoch, B=16, lr 0.02, seed 0 — one clean FedAvg run, then every
strategy × attack with 20 % Byzantine clients (2 of 10, the same two in every run: the choice is
seeded). Final and best server-side test accuracy over the rounds.

Time: what each strategy computes for one round of N updates of P float32 values. Streaming
strategies (fedavg, clip) fold the N in-memory vectors into a float64 WeightedSum (clip first
clips each delta) and take the mean — in the engine that work is spread over the uploads; the
others aggregate N spool files through np.memmap (page cache warm, as right after the uploads),
as the engine does at round close. Median over repeats; peak = tracemalloc peak of one call.

    python benchmarks/bench_robust.py                 # 20 rounds, 2 attacks x 6 strategies, ~2 min
    python benchmarks/bench_robust.py --quick         # 5 rounds, fewer strategies, small timing sizes
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedort.coordinator.aggregation import SpooledUpdate, WeightedSum, parse_strategy  # noqa: E402

STRATEGIES = ("fedavg", "clip:3", "median", "trimmed-mean:0.2", "krum:2", "multi-krum:2:5")
ATTACKS = ("sign-flip", "scale:10")


def accuracy_runs(args: argparse.Namespace, out: Path) -> list[dict]:
    import logging

    from fedort.simulations.config import SimulationConfig
    from fedort.simulations.runner import run_simulation

    for name in ("coordinator", "fedort", "edge_client"):
        logging.getLogger(name).setLevel(logging.WARNING)
    base = dict(clients=args.clients, rounds=args.rounds, partition=args.partition, local_epochs=1, batch_size=16,
                lr=0.02, seed=args.seed, workers=2, progress=False)
    plan = [("fedavg", "none", 0.0)] + [(s, a, args.byzantine) for a in args.attacks for s in args.strategies]
    rows = []
    for strategy, attack, fraction in plan:
        t0 = time.monotonic()
        cfg = SimulationConfig.from_mapping(dict(out=out / f"{strategy}-{attack}".replace(":", "_"), strategy=strategy,
                               byzantine_fraction=fraction, attack=attack if fraction else "sign-flip", **base))
        acc = [r.accuracy for r in run_simulation(cfg).records]
        rows.append(dict(strategy=strategy, attack=attack, byzantine=fraction, final=acc[-1], best=max(acc),
                         curve=[round(a, 4) for a in acc], seconds=round(time.monotonic() - t0, 1)))
        print(f"{strategy:>18} {attack:>9}  final {100 * acc[-1]:5.1f} %  best {100 * max(acc):5.1f} %  "
              f"({rows[-1]['seconds']} s)", flush=True)
    return rows


def timing(strategies, clients: int, length: int, repeats: int) -> list[dict]:
    rng = np.random.default_rng(0)
    g = rng.normal(size=length).astype(np.float32)
    vectors = [(g + rng.normal(0, 0.05, size=length)).astype(np.float32) for _ in range(clients)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        updates = []
        for i, v in enumerate(vectors):
            path = Path(tmp) / f"client-{i:04d}.f32"
            v.tofile(path)
            updates.append(SpooledUpdate(f"client-{i:04d}", path, 100 + i))

        for spec in strategies:
            strategy = parse_strategy(spec)

            def one_round():
                if strategy.needs_all_updates:
                    return strategy.aggregate(updates, g)
                total = WeightedSum(length, np.dtype(np.float64))
                for u, v in zip(updates, vectors):
                    total.add(strategy.prepare(v, g), u.num_examples)
                return total.mean()

            one_round()  # warm: page cache, allocator
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                one_round()
                times.append(time.perf_counter() - t0)
            tracemalloc.start()
            one_round()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            rows.append(dict(strategy=spec, clients=clients, length=length, ms=1000 * statistics.median(times),
                             peak_mib=peak / 2**20))
            print(f"{spec:>18}  N={clients} P={length:>9,}  {rows[-1]['ms']:8.1f} ms/round  "
                  f"peak {rows[-1]['peak_mib']:6.1f} MiB", flush=True)
    return rows


def markdown(acc: list[dict], times: list[dict], attacks) -> str:
    clean = next(r for r in acc if r["byzantine"] == 0)
    lines = ["| strategy | " + " | ".join(f"{a}: final / best %" for a in attacks) + " |",
             "| --- | " + " | ".join("---" for _ in attacks) + " |",
             "| clean FedAvg (no attackers) | " + " | ".join(
                 f"{100 * clean['final']:.1f} / {100 * clean['best']:.1f}" for _ in attacks) + " |"]
    for s in dict.fromkeys(r["strategy"] for r in acc if r["byzantine"]):
        cells = []
        for a in attacks:
            r = next((r for r in acc if r["strategy"] == s and r["attack"] == a), None)
            cells.append("n/a" if r is None else f"{100 * r['final']:.1f} / {100 * r['best']:.1f}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines += ["", "| strategy | clients | P | ms per round | peak MiB |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {t['strategy']} | {t['clients']} | {t['length']:,} | {t['ms']:.1f} | {t['peak_mib']:.1f} |"
              for t in times]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--partition", default="iid")
    p.add_argument("--byzantine", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    p.add_argument("--attacks", nargs="+", default=list(ATTACKS))
    p.add_argument("--sizes", nargs="+", type=int, default=[9610, 2_000_000], help="P values to time")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="5 rounds, 3 strategies, small timing sizes")
    p.add_argument("--skip-accuracy", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / ".work" / "robust" / time.strftime("%Y%m%d-%H%M%S"))
    args = p.parse_args()
    if args.quick:
        args.rounds, args.strategies, args.sizes, args.repeats = 5, ["fedavg", "median", "krum:2"], [9610], 3
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    acc = [] if args.skip_accuracy else accuracy_runs(args, args.out)
    times = [t for n in args.sizes for t in timing(args.strategies, args.clients, n, args.repeats)]
    doc = dict(started=started, argv=sys.argv[1:], load=os.getloadavg(), accuracy=acc, timing=times)
    (args.out / "results.json").write_text(json.dumps(doc, indent=2))
    print()
    if acc:
        print(markdown(acc, times, args.attacks))
    print(f"\nresults: {args.out / 'results.json'}; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
