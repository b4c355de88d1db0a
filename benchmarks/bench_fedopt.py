"""Server optimizers (and FedProx) on non-IID data: rounds to a target accuracy and final accuracy.

Each run is one `fedort simulate` subprocess (the public CLI, so this script needs nothing but the
installed `fedort`), seeded; every variant runs on every workload for every seed, and the table
gives mean ± std over seeds of the final server-side test accuracy and of the rounds needed to
first reach the workload's target (over the seeds that reached it; "k/n" says how many did).

Workloads (issue 11): digits `shards:2`, 100 clients, 10 per round (MLP); Synthetic(1, 1) of the
FedProx paper, 30 clients, 10 per round (`--dataset synthetic:1,1`, from the data branch).
Variants: server-optimizer specs (`fedavg` runs without the flag, so it also runs before the
flag reaches the engine), and `prox:MU` = FedAvg with `--prox-mu MU` on SGD artifacts
(`--optimizer sgd --lr SGD_LR`: FedProx's correction is exact for SGD only), `prox:0` being the
SGD FedAvg baseline those compare with.

Before running anything, the script reads `fedort simulate --help`: runs whose flags the CLI does
not have (`--server-optimizer`, `--dataset`, `--prox-mu`) are skipped with the reason, and a
coordinator that refuses a server optimizer it cannot apply yet is reported as "not integrated";
neither is an error (exit 0). Exit 1 only if a run that could run failed.

    python benchmarks/bench_fedopt.py --dry-run            # print the commands
    python benchmarks/bench_fedopt.py --quick              # 1 seed, 10 rounds, 3 variants
    python benchmarks/bench_fedopt.py                      # 3 seeds, full variants (hours on 2 cores)
    python benchmarks/bench_fedopt.py --workloads digits --variants fedavg fedyogi --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NOT_INTEGRATED = "not applied by this coordinator's round engine yet"

VARIANTS = ("fedavg", "fedavgm:lr=1.0,momentum=0.9", "fedadam:lr=0.01,beta1=0.9,beta2=0.99,tau=0.001",
            "fedyogi:lr=0.01,beta1=0.9,beta2=0.99,tau=0.001", "prox:0", "prox:0.01", "prox:0.1", "prox:1")


@dataclass(frozen=True)
class Workload:
    name: str
    flags: tuple[str, ...]     # `fedort simulate` flags that define the data, model and local recipe
    rounds: int
    target: float


def workloads(args: argparse.Namespace) -> dict[str, Workload]:
    local = ("--local-epochs", str(args.local_epochs), "--batch-size", str(args.batch_size), "--lr", str(args.lr))
    return {
        "digits": Workload("digits shards:2", ("--clients", "100", "--clients-per-round", "10", "--partition", "shards:2",
                                                "--model", "mlp", *local), args.rounds, args.digits_target),
        "synthetic": Workload("Synthetic(1,1)", ("--dataset", "synthetic:1,1", "--clients", "30", "--clients-per-round",
                                                 "10", *shlex.split(args.synthetic_flags), *local),
                              args.rounds, args.synthetic_target),
    }


def variant_flags(variant: str, sgd_lr: float) -> tuple[str, ...]:
    """FedProx (`prox:MU`, `prox:0` = its FedAvg baseline) needs SGD artifacts, with their own client lr."""
    if variant.startswith("prox:"):
        return ("--optimizer", "sgd", "--lr", str(sgd_lr), "--prox-mu", variant.split(":", 1)[1])
    if variant == "fedavg":
        return ()
    return ("--server-optimizer", variant)


def fedort_command() -> list[str]:
    exe = Path(sys.executable).with_name("fedort")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "fedort"]


def available_flags() -> set[str]:
    """Every `--flag` that `fedort simulate --help` mentions."""
    result = subprocess.run(fedort_command() + ["simulate", "--help"], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise SystemExit(f"`fedort simulate --help` failed (exit {result.returncode}): {result.stderr.strip()}")
    return {word.strip("[],") for word in result.stdout.split() if word.startswith("--")}


@dataclass
class Run:
    workload: str
    variant: str
    seed: int
    command: list[str]
    status: str = "pending"        # ok | failed | skipped | not integrated
    reason: str = ""
    curve: list[float | None] = field(default_factory=list)
    final: float | None = None
    rounds_to_target: int | None = None
    seconds: float = 0.0


def run_one(run: Run, out: Path, target: float, timeout: float) -> None:
    t0 = time.monotonic()
    try:
        result = subprocess.run(run.command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        run.status, run.reason = "failed", f"timed out after {timeout:.0f} s"
        return
    run.seconds = round(time.monotonic() - t0, 1)
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        run.status = "not integrated" if NOT_INTEGRATED in result.stderr else "failed"
        run.reason = tail
        return
    doc = json.loads((out / "metrics.json").read_text())
    run.curve = [r.get("accuracy") for r in doc["rounds"]]
    run.final = doc.get("final", {}).get("test_accuracy", run.curve[-1] if run.curve else None)
    run.rounds_to_target = next((r["round"] for r in doc["rounds"] if (r.get("accuracy") or 0) >= target), None)
    run.status = "ok"


def mean_std(values: list[float], fmt: str) -> str:
    if not values:
        return "–"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{fmt.format(statistics.mean(values))} ± {fmt.format(std)}"


def table(runs: list[Run], loads: dict[str, Workload]) -> str:
    lines = ["| workload | variant | final accuracy % | rounds to target | reached | status |",
             "| --- | --- | --- | --- | --- | --- |"]
    for key, wl in loads.items():
        for variant in dict.fromkeys(r.variant for r in runs if r.workload == key):
            group = [r for r in runs if r.workload == key and r.variant == variant]
            ok = [r for r in group if r.status == "ok"]
            finals = [100 * r.final for r in ok if r.final is not None]
            reached = [r.rounds_to_target for r in ok if r.rounds_to_target is not None]
            statuses = sorted({r.status if r.status == "ok" else f"{r.status}: {r.reason}" for r in group})
            lines.append(f"| {wl.name} (target {100 * wl.target:.0f} %) | `{variant}` | {mean_std(finals, '{:.1f}')} | "
                         f"{mean_std([float(x) for x in reached], '{:.1f}')} | {len(reached)}/{len(ok)} | "
                         f"{'; '.join(statuses)} |")
    return "\n".join(lines)


def plot(runs: list[Run], loads: dict[str, Workload], path: Path) -> Path | None:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    keys = [k for k in loads if any(r.workload == k and r.status == "ok" for r in runs)]
    if not keys:
        return None
    fig = Figure(figsize=(7 * len(keys), 4.5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    for ax, key in zip(fig.subplots(1, len(keys), squeeze=False)[0], keys):
        for variant in dict.fromkeys(r.variant for r in runs if r.workload == key):
            curves = [r.curve for r in runs if r.workload == key and r.variant == variant and r.status == "ok"]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            mean = [statistics.mean((c[i] or 0.0) for c in curves) for i in range(n)]
            ax.plot(range(1, n + 1), mean, label=variant.split(",")[0])
        ax.axhline(loads[key].target, linestyle="--", color="grey", linewidth=0.8)
        ax.set_title(f"{loads[key].name}: mean test accuracy over seeds")
        ax.set_xlabel("round")
        ax.legend(fontsize=8)
    fig.savefig(path)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", nargs="+", choices=("digits", "synthetic"), default=["digits", "synthetic"])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS),
                   help="server-optimizer specs, or prox:MU for FedAvg with --prox-mu MU")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--local-epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.02, help="client learning rate")
    p.add_argument("--sgd-lr", type=float, default=0.1, help="client lr of the FedProx (SGD) variants")
    p.add_argument("--digits-target", type=float, default=0.70,
                   help="FedAvg, 50 rounds, lr 0.02: best 79-83 %%, final 69.6 ± 9.6 %% over seeds 0-2 (default %(default)s)")
    p.add_argument("--synthetic-target", type=float, default=0.60, help="not measured yet (default %(default)s)")
    p.add_argument("--synthetic-flags", default="--model logreg",
                   help="extra `fedort simulate` flags for Synthetic(1,1) (default: %(default)s)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    p.add_argument("--quick", action="store_true", help="1 seed, 10 rounds, fedavg/fedavgm/fedadam")
    p.add_argument("--dry-run", action="store_true", help="print the commands (and what would be skipped) only")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / ".work" / "fedopt" / time.strftime("%Y%m%d-%H%M%S"))
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.rounds, args.variants = args.seeds[:1], 10, list(VARIANTS[:3])
    loads = {k: v for k, v in workloads(args).items() if k in args.workloads}
    have = available_flags()

    runs: list[Run] = []
    for key, wl in loads.items():
        for variant in args.variants:
            for seed in args.seeds:
                out = args.out / key / variant.replace(":", "_").replace(",", "_").replace("=", "") / f"seed-{seed}"
                cmd = fedort_command() + ["simulate", *wl.flags, *variant_flags(variant, args.sgd_lr), "--rounds", str(wl.rounds),
                                          "--seed", str(seed), "--workers", str(args.workers), "--no-progress",
                                          "--out", str(out)]
                run = Run(key, variant, seed, cmd)
                missing = sorted({f for f in cmd if f.startswith("--")} - have)
                if missing:
                    run.status, run.reason = "skipped", f"`fedort simulate` has no {', '.join(missing)}"
                runs.append(run)

    for run in runs:
        print(("# skip: " + run.reason + "\n# " if run.status == "skipped" else "") + shlex.join(run.command), flush=True)
    if args.dry_run:
        return 0

    args.out.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for run in runs:
        if run.status != "pending":
            continue
        refused = next((r for r in runs if r.status == "not integrated" and r.variant == run.variant), None)
        if refused is not None:   # the coordinator refused this variant already: do not rebuild data to hear it again
            run.status, run.reason = refused.status, refused.reason
            continue
        out = Path(run.command[run.command.index("--out") + 1])
        run_one(run, out, loads[run.workload].target, args.timeout)
        shown = f"final {100 * run.final:.1f} %, target at round {run.rounds_to_target}" if run.status == "ok" \
            else f"{run.status}: {run.reason}"
        print(f"{loads[run.workload].name:>16} {run.variant:<50} seed {run.seed}: {shown} ({run.seconds} s)", flush=True)

    doc = dict(started=started, argv=sys.argv[1:], load=os.getloadavg(), runs=[r.__dict__ for r in runs])
    (args.out / "results.json").write_text(json.dumps(doc, indent=1, default=str))
    print()
    print(table(runs, loads))
    png = plot(runs, loads, args.out / "fedopt.png")
    print(f"\nresults: {args.out / 'results.json'}" + (f"; plot: {png}" if png else ""))
    return 1 if any(r.status == "failed" for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
