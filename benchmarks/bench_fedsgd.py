"""FedAvg vs FedSGD on digits with 2-class shards: rounds to 90 % and 93 % test accuracy.

In the spirit of McMahan et al. (2017), Table 2 / Figure 2: the pathological non-IID split
(`shards:2`: each of 10 clients holds 2 single-label shards), all 10 clients every round, the
built-in MLP (64-128-10), server-side test accuracy after every round. FedAvg trains E=5 local
epochs with batch B=10; FedSGD one epoch over the whole local data set as one batch (B=∞), i.e.
one gradient step per client per round, averaged. Each method gets a small learning-rate grid
(the paper tuned the rate per method) and the best rate per method is compared.

Every run is a real `fedort simulate` (coordinator + edge clients over loopback gRPC) of a
scenario file written to benchmarks/.work/fedsgd/ (the simulation's `optimizer` setting is only
in scenario files). The optimizer is plain SGD by default (`--optimizer adamw` for the
default AdamW, whose per-parameter scaling makes the comparison less like the paper's).
Full batch is `batch_size = 0` when the coordinator accepts it, else a batch larger than any
client's data set (2,000 > the ~150 examples a client holds), which is the same thing.
Runs are interleaved (FedAvg lr1, FedSGD lr1, FedAvg lr2, ...), so load changes hit both.

    python benchmarks/bench_fedsgd.py                                  # 3 + 3 rates x seeds 0, 1: ~5 min
    python benchmarks/bench_fedsgd.py --seeds 0 1 --fedavg-lr 0.1 --fedsgd-lr 1.0
    python benchmarks/bench_fedsgd.py --quick                          # 1 rate each, fewer rounds
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / ".work" / "fedsgd"
THRESHOLDS = (0.90, 0.93)
BIG_BATCH = 2000


def full_batch_size() -> tuple[int, str]:
    """0 if the coordinator accepts batch_size=0 (whole local data set), else BIG_BATCH."""
    from fedort.coordinator.config import CoordinatorConfig
    from fedort.common.errors import ConfigError

    try:
        CoordinatorConfig.from_mapping(dict(artifacts=Path("a"), state_dir=Path("s"), batch_size=0))
        return 0, "batch_size 0 (whole local data set)"
    except ConfigError:
        return BIG_BATCH, f"batch_size {BIG_BATCH} (> every client's examples; the coordinator rejects 0)"


def rounds_to(acc: list[float | None], threshold: float) -> int | None:
    for i, a in enumerate(acc, start=1):
        if a is not None and a >= threshold:
            return i
    return None


def run_one(method: str, lr: float, seed: int, epochs: int, batch: int, rounds: int, optimizer: str,
            partition: str, clients: int) -> dict:
    name = f"{method}-lr{lr:g}-s{seed}"
    out = WORK / name
    shutil.rmtree(out, ignore_errors=True)
    scenario = WORK / f"{name}.toml"
    scenario.write_text(
        f'name = "{name}"\nmodel = "mlp"\noptimizer = "{optimizer}"\nclients = {clients}\nfraction = 1.0\n'
        f'rounds = {rounds}\npartition = "{partition}"\nlocal_epochs = {epochs}\nbatch_size = {batch}\n'
        f'lr = {lr}\nseed = {seed}\n')
    fedort = shutil.which("fedort", path=str(Path(sys.executable).parent)) or "fedort"
    t0 = time.perf_counter()
    proc = subprocess.run([fedort, "simulate", str(scenario), "--out", str(out), "--no-progress"], cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"method": method, "lr": lr, "seed": seed, "error": (proc.stderr or proc.stdout)[-600:].strip(),
                "wall_s": wall}
    doc = json.loads((out / "metrics.json").read_text())
    acc = [r.get("accuracy") for r in doc["rounds"]]
    best = max((a for a in acc if a is not None), default=None)
    return {"method": method, "lr": lr, "seed": seed, "epochs": epochs, "batch": batch, "rounds": len(acc),
            "to90": rounds_to(acc, 0.90), "to93": rounds_to(acc, 0.93), "best": best,
            "best_round": acc.index(best) + 1 if best is not None else None, "final": acc[-1] if acc else None,
            "wall_s": wall, "accuracy": acc}


def _r(x) -> str:
    return "–" if x is None else str(x)


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--fedavg-lr", type=float, nargs="+", default=[0.1, 0.3, 1.0], help="FedAvg rates (default 0.1 0.3 1)")
    ap.add_argument("--fedsgd-lr", type=float, nargs="+", default=[0.3, 1.0, 3.0], help="FedSGD rates (default 0.3 1 3)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds (partition, model init, selection, shuffling; default 0 1)")
    ap.add_argument("--fedavg-rounds", type=int, default=50, help="round cap for FedAvg (default 50)")
    ap.add_argument("--fedsgd-rounds", type=int, default=100, help="round cap for FedSGD (default 100)")
    ap.add_argument("--epochs", type=int, default=5, help="FedAvg local epochs E (default 5)")
    ap.add_argument("--batch", type=int, default=10, help="FedAvg batch size B (default 10)")
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd", help="client optimizer (default sgd)")
    ap.add_argument("--partition", default="shards:2")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="one rate each (0.1 / 1.0), 20 / 40 rounds")
    ap.add_argument("--json", type=Path, help="also write every run (with its accuracy curve) here")
    args = ap.parse_args(argv)
    if args.quick:
        args.fedavg_lr, args.fedsgd_lr, args.fedavg_rounds, args.fedsgd_rounds = [0.1], [1.0], 20, 40
    WORK.mkdir(parents=True, exist_ok=True)
    full, full_note = full_batch_size()
    load = os.getloadavg()
    print(f"# {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"# {args.partition}, {args.clients} clients, all per round, MLP, optimizer {args.optimizer}; "
          f"FedAvg E={args.epochs} B={args.batch}; FedSGD E=1 {full_note}")
    plan = []
    for seed in args.seeds:
        for i in range(max(len(args.fedavg_lr), len(args.fedsgd_lr))):
            if i < len(args.fedavg_lr):
                plan.append(("FedAvg", args.fedavg_lr[i], seed, args.epochs, args.batch, args.fedavg_rounds))
            if i < len(args.fedsgd_lr):
                plan.append(("FedSGD", args.fedsgd_lr[i], seed, 1, full, args.fedsgd_rounds))
    runs = []
    for method, lr, seed, e, b, rounds in plan:
        r = run_one(method, lr, seed, e, b, rounds, args.optimizer, args.partition, args.clients)
        runs.append(r)
        if "error" in r:
            print(f"{method:6s} lr={lr:<5g} seed={seed}: FAILED: {r['error']}", flush=True)
            continue
        print(f"{method:6s} lr={lr:<5g} seed={seed}: rounds to 90 % {_r(r['to90']):>4s}, to 93 % {_r(r['to93']):>4s} "
              f"(cap {rounds}); best {_pct(r['best'])} % at round {r['best_round']}, final {_pct(r['final'])} %; "
              f"{r['wall_s']:.0f} s", flush=True)

    print()
    print("| method | E | B | lr | seed | rounds to 90 % | rounds to 93 % | best acc % (round) | final acc % | rounds run | wall s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in runs:
        if "error" in r:
            print(f"| {r['method']} | | | {r['lr']:g} | {r['seed']} | failed | | | | | {r['wall_s']:.0f} |")
            continue
        b = "∞ (full)" if r["method"] == "FedSGD" else str(r["batch"])
        print(f"| {r['method']} | {r['epochs']} | {b} | {r['lr']:g} | {r['seed']} | {_r(r['to90'])} | {_r(r['to93'])} | "
              f"{_pct(r['best'])} ({r['best_round']}) | {_pct(r['final'])} | {r['rounds']} | {r['wall_s']:.0f} |")

    # best rate per method: fewest median rounds to 93 % (then 90 %), over seeds; a miss counts as cap + 1
    print()
    best = {}
    for method in ("FedAvg", "FedSGD"):
        rates = sorted({r["lr"] for r in runs if r["method"] == method and "error" not in r})
        scored = []
        for lr in rates:
            rs = [r for r in runs if r["method"] == method and r["lr"] == lr and "error" not in r]
            cap = rs[0]["rounds"] + 1
            scored.append((statistics.median(r["to93"] or cap for r in rs),
                           statistics.median(r["to90"] or cap for r in rs), lr, rs))
        if scored:
            best[method] = min(scored)
    for method, (t93, t90, lr, rs) in best.items():
        cap = rs[0]["rounds"]
        print(f"best {method}: lr {lr:g}: median rounds to 90 % {t90 if t90 <= cap else f'> {cap}'}, "
              f"to 93 % {t93 if t93 <= cap else f'> {cap}'} over seeds {[r['seed'] for r in rs]}")
    if len(best) == 2:
        a, s = best["FedAvg"], best["FedSGD"]
        for i, label in ((1, "90 %"), (0, "93 %")):
            if a[i] <= a[3][0]["rounds"]:
                more = "" if s[i] <= s[3][0]["rounds"] else " (FedSGD did not get there: a lower bound)"
                print(f"rounds to {label}: FedSGD / FedAvg = {s[i]:g} / {a[i]:g} = {s[i] / a[i]:.1f}x{more}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
