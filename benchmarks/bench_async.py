"""Synchronous FedAvg vs asynchronous FedBuff with slow devices: simulated time to a target accuracy.

Digits Dirichlet(0.3), 30 clients, 30 % of them 10× slower (`--device-speed slow:0.3:10`), on the
simulation's virtual clock (simulations/virtual_clock.py: simulated compute time per local step,
no real sleeping, so the figures do not depend on the machine's load). Sync: 10 clients per
round, a round ends when its slowest client's update arrives. Async (FedBuff): every client
trains whenever it is free on the latest version; 10 updates make a version; staleness weight
poly:0.5; max staleness large enough that slow devices' updates still count. Each run is one
`fedort simulate` subprocess; the table gives mean ± std over seeds of the simulated seconds to
first reach the target (server-side test accuracy after a round / version) and the final accuracy.

    python benchmarks/bench_async.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fedort_command() -> list[str]:
    exe = Path(sys.executable).with_name("fedort")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "fedort"]


def modes(args: argparse.Namespace) -> dict[str, list[str]]:
    return {
        "sync FedAvg": ["--clients-per-round", "10", "--rounds", str(args.sync_rounds)],
        "async FedBuff": ["--mode", "async", "--buffer-size", "10", "--max-staleness", str(args.max_staleness),
                          "--staleness-weight", args.staleness_weight, "--rounds", str(args.async_versions)],
    }


def run(cmd: list[str], out: Path, target: float) -> dict:
    t0 = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=ROOT)
    if result.returncode != 0:
        raise SystemExit(f"failed: {shlex.join(cmd)}\n{result.stderr[-2000:]}")
    doc = json.loads((out / "metrics.json").read_text())
    curve = [(r["metrics"].get("sim_seconds"), r.get("accuracy")) for r in doc["rounds"]]
    hit = next((t for t, a in curve if a is not None and a >= target), None)
    return {"curve": curve, "time_to_target": hit, "final": doc["final"]["test_accuracy"],
            "sim_seconds": doc["final"].get("sim_seconds"), "real_seconds": round(time.monotonic() - t0, 1)}


def mean_std(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "–"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{fmt.format(statistics.mean(values))} ± {fmt.format(std)}"


def plot(results: dict[str, list[dict]], target: float, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for (name, runs), color in zip(results.items(), ("tab:blue", "tab:orange")):
        for i, r in enumerate(runs):
            ax.plot([t for t, _ in r["curve"]], [a for _, a in r["curve"]], color=color, alpha=0.8,
                    label=name if i == 0 else None)
    ax.axhline(target, linestyle="--", color="grey", linewidth=0.8)
    ax.set_xlabel("simulated seconds")
    ax.set_ylabel("test accuracy")
    ax.set_title("digits Dirichlet(0.3), 30 clients, 30 % 10× slower")
    ax.legend()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--target", type=float, default=0.90)
    p.add_argument("--sync-rounds", type=int, default=40)
    p.add_argument("--async-versions", type=int, default=150)
    p.add_argument("--max-staleness", type=int, default=100)
    p.add_argument("--staleness-weight", default="poly:0.5")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / ".work" / "async" / time.strftime("%Y%m%d-%H%M%S"))
    args = p.parse_args(argv)
    common = ["--clients", "30", "--partition", "dirichlet:0.3", "--device-speed", "slow:0.3:10", "--lr", str(args.lr),
              "--no-progress"]
    results: dict[str, list[dict]] = {}
    for name, flags in modes(args).items():
        for seed in args.seeds:
            out = args.out / name.split()[0] / f"seed-{seed}"
            cmd = fedort_command() + ["simulate", *common, *flags, "--seed", str(seed), "--out", str(out)]
            print(shlex.join(cmd), flush=True)
            r = run(cmd, out, args.target)
            results.setdefault(name, []).append(r)
            print(f"  {name} seed {seed}: {r['time_to_target']} simulated s to {args.target:.0%}, final "
                  f"{100 * r['final']:.1f} % ({r['real_seconds']} s real)", flush=True)
    lines = [f"| mode | simulated s to {100 * args.target:.0f} % | reached | final accuracy % | simulated s in all |",
             "| --- | --- | --- | --- | --- |"]
    for name, runs in results.items():
        hits = [r["time_to_target"] for r in runs if r["time_to_target"] is not None]
        lines.append(f"| {name} | {mean_std(hits)} | {len(hits)}/{len(runs)} | "
                     f"{mean_std([100 * r['final'] for r in runs], '{:.1f}')} | "
                     f"{mean_std([r['sim_seconds'] for r in runs])} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"argv": sys.argv[1:], "results": results}, indent=1))
    plot(results, args.target, args.out / "async.png")
    print("\n" + "\n".join(lines) + f"\n\nresults: {args.out / 'results.json'}; plot: {args.out / 'async.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
