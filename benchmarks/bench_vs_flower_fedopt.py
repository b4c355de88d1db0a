"""fedort's FedAdam / FedYogi / FedProx against Flower's on the README's task with the same ORT clients.

The task is `bench_vs_flower_task.py`'s and the Flower side the same harness, `flower_ort.py` (digits,
10 clients, Dirichlet(0.5), E = 2, B = 16, fresh client optimizer state each round, all 10 clients
every round, server-side test accuracy after every round): same artifacts, initial vector, client
partitions, per-client seeds and test split on both sides; Flower's `NumPyClient.fit` is fedort's
ORT training (`TrainingSession` + `Trainer` + `TrainingModule`). Only the strategy changes:

- fedadam: fedort `--server-optimizer fedadam:lr=0.01,beta1=0.9,beta2=0.99,tau=0.001,bias_correction=flower`
  vs Flower `FedAdam(eta=0.01, beta_1=0.9, beta_2=0.99, tau=1e-3)` (Flower's defaults are eta 0.1,
  tau 1e-9; its eta_l is stored, never used by the strategy). Clients: AdamW, lr 0.02.
- fedyogi: fedort `fedyogi:lr=0.01,beta1=0.9,beta2=0.99,tau=0.001` vs Flower `FedYogi(...)` with the
  same values (Flower's defaults). Clients: AdamW, lr 0.02.
- fedprox: fedort `--optimizer sgd --lr 0.1 --prox-mu 0.1` vs Flower `FedProx(proximal_mu=0.1)`;
  the Flower client reads `config["proximal_mu"]` and trains with fedort's exact proximal SGD step
  (`edge_client.fedprox.proximal_step` around the round's global vector, as `local_round.fit` does).
  SGD artifacts on both sides.

Each (variant, seed) runs fedort then Flower, each in its own subprocess; printed and saved: accuracy
after every round, accuracy at rounds 5/10/20/30, max |difference| over rounds, wall times, load.

    python benchmarks/bench_vs_flower_fedopt.py --seeds 0 1 --plot benchmarks/figures/vs_flower_fedopt.png
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_vs_flower_task as task_bench  # noqa: E402  (the FedAvg comparison: scenario, Flower venv)

WORK = HERE / ".work" / "vs-flower-fedopt"
SCENARIO = task_bench.SCENARIO
SERVER = {"lr": 0.01, "beta1": 0.9, "beta2": 0.99, "tau": 1e-3}
SGD_LR, PROX_MU = 0.1, 0.1
VARIANTS = ("fedadam", "fedyogi", "fedprox")


def fedort_flags(variant: str) -> list[str]:
    opts = ",".join(f"{k}={v}" for k, v in SERVER.items())
    if variant == "fedadam":
        return ["--server-optimizer", f"fedadam:{opts},bias_correction=flower"]
    if variant == "fedyogi":
        return ["--server-optimizer", f"fedyogi:{opts}"]
    return ["--optimizer", "sgd", "--lr", str(SGD_LR), "--prox-mu", str(PROX_MU)]


def prepare(work: Path, variant: str, seed: int) -> dict:
    """Artifacts and per-client data exactly as `fedort simulate` builds them for this variant and seed."""
    from fedort.simulations.config import load_config

    sgd = variant == "fedprox"
    cfg = load_config(SCENARIO, {"progress": False, "seed": seed, "optimizer": "sgd" if sgd else None,
                                 "lr": SGD_LR if sgd else None})
    art = task_bench.flower_artifacts(cfg, work / f"artifacts-{cfg.optimizer}-seed{seed}")
    data = work / f"data-seed{seed}"
    if not (data / "test.npz").exists():
        task_bench.flower_data(cfg, data)
    return {"clients": cfg.clients, "epochs": cfg.local_epochs, "batch": cfg.batch_size, "lr": cfg.lr,
            "seed": cfg.seed, "artifacts": str(art), "data": str(data)}


def fedort_trial(variant: str, seed: int, rounds: int) -> dict:
    return task_bench.fedort_trial(rounds, ["--seed", str(seed), *fedort_flags(variant)], WORK)


def flower_strategy(variant: str) -> dict:
    if variant == "fedprox":
        return {"proximal_mu": PROX_MU}
    return {"eta": SERVER["lr"], "beta_1": SERVER["beta1"], "beta_2": SERVER["beta2"], "tau": SERVER["tau"]}


def flower_trial(py: Path, variant: str, task: dict, rounds: int, cpus: int) -> dict:
    """Flower's run of the task with the variant's strategy (flower_ort.py, shared with bench_vs_flower_task)."""
    import flower_ort

    spec = {"artifacts": task["artifacts"], "data": task["data"], "rounds": rounds, "clients": task["clients"],
            "cpus": cpus, "epochs": task["epochs"], "batch": task["batch"], "seed": task["seed"], "lr": task["lr"],
            "strategy": variant, "options": flower_strategy(variant)}
    res = flower_ort.trial(py, WORK / "flower_fedopt_task.py", spec)
    if res.get("client_failures"):
        raise RuntimeError(f"{res['client_failures']} Flower client fits failed ({variant}, seed {task['seed']})")
    return {"wall_s": res["wall_s"], "accuracy": res["accuracy"], "flwr": res["flwr"], "strategy": res["options"]}


def at(acc: list[float], r: int) -> str:
    return f"{acc[r - 1]:.4f}" if len(acc) >= r else "-"


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(VARIANTS), figsize=(5 * len(VARIANTS), 3.8), sharey=True)
    for ax, variant in zip(axes, VARIANTS):
        for i, run in enumerate(r for r in runs if r["variant"] == variant):
            rounds = range(1, len(run["fedort"]["accuracy"]) + 1)
            # thick translucent fedort under thin Flower with markers: identical curves stay both visible
            ax.plot(rounds, run["fedort"]["accuracy"], color=f"C{2 * i}", lw=5, alpha=0.35,
                    label=f"fedort seed {run['seed']}")
            ax.plot(rounds, run["flower"]["accuracy"], color=f"C{2 * i + 1}", lw=1, marker=".", ms=4,
                    label=f"Flower seed {run['seed']}")
        ax.set_title(variant)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("server test accuracy")
    fig.suptitle("digits, 10 clients, Dirichlet(0.5), E=2, B=16: fedort vs Flower 1.42 with the same ORT clients")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--flower-cpus", type=int, default=1, help="Ray CPUs per Flower client (default 1)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path)
    args = ap.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    py = task_bench.flower_python()
    print(f"# {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"server {SERVER}, FedProx mu {PROX_MU} (SGD lr {SGD_LR})", flush=True)
    runs = []
    for variant in args.variants:
        for seed in args.seeds:
            task = prepare(WORK, variant, seed)
            load0 = os.getloadavg()[0]
            fo = fedort_trial(variant, seed, args.rounds)
            fl = flower_trial(py, variant, task, args.rounds, args.flower_cpus)
            diff = [abs(a - b) for a, b in zip(fo["accuracy"], fl["accuracy"])]
            run = {"variant": variant, "seed": seed, "load": [load0, os.getloadavg()[0]], "fedort": fo, "flower": fl,
                   "max_abs_diff": max(diff), "mean_abs_diff": sum(diff) / len(diff)}
            runs.append(run)
            print(f"{variant:8s} seed {seed}: load {load0:.1f}->{run['load'][1]:.1f}  "
                  f"wall fedort {fo['wall_s']:.1f} s, Flower {fl['wall_s']:.1f} s  "
                  f"max|diff| {run['max_abs_diff']:.4f} mean|diff| {run['mean_abs_diff']:.4f}", flush=True)
            print("  round  " + " ".join(f"{r:6d}" for r in range(1, args.rounds + 1)))
            for side in ("fedort", "flower"):
                print(f"  {side:6s} " + " ".join(f"{a:6.3f}" for a in run[side]["accuracy"]), flush=True)
    print("\n| variant | seed | side | r5 | r10 | r20 | r30 | final | max abs diff per round | wall s | load |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for run in runs:
        for side in ("fedort", "flower"):
            acc = run[side]["accuracy"]
            print(f"| {run['variant']} | {run['seed']} | {side} | {at(acc, 5)} | {at(acc, 10)} | {at(acc, 20)} | "
                  f"{at(acc, 30)} | {acc[-1]:.4f} | {run['max_abs_diff']:.4f} | {run[side]['wall_s']:.1f} | "
                  f"{run['load'][0]:.1f}-{run['load'][1]:.1f} |")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs}, indent=1))
    if args.plot:
        plot(runs, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
