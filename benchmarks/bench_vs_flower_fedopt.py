"""fedort's FedAdam / FedYogi / FedProx against Flower's on the README's task with the same ORT clients.

The task and the Flower harness are `bench_vs_flower_task.py`'s (digits, 10 clients, Dirichlet(0.5),
E = 2, B = 16, fresh client optimizer state each round, all 10 clients every round, server-side
test accuracy after every round): same artifacts, initial vector, client partitions, per-client
seeds and test split on both sides; Flower's `NumPyClient.fit` is fedort's ORT training
(`TrainingSession` + `Trainer` + `TrainingModule`). Only the strategy changes:

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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_vs_flower_task as task_bench  # noqa: E402  (the FedAvg comparison: venv, Flower harness)

ROOT = HERE.parent
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
    from fedort.edge_client.artifacts import build_artifacts
    from fedort.edge_client.models import builtin_model
    from fedort.simulations.config import load_config
    from fedort.simulations.datasets import load_digits_split, save_npz, subset
    from fedort.simulations.population import digits_population

    sgd = variant == "fedprox"
    cfg = load_config(SCENARIO, {"progress": False, "seed": seed, "optimizer": "sgd" if sgd else None,
                                 "lr": SGD_LR if sgd else None})
    art = work / f"artifacts-{cfg.optimizer}-seed{seed}"
    if not (art / "manifest.json").exists():
        build_artifacts(builtin_model(cfg.model, seed=cfg.seed), art, optimizer=cfg.optimizer)
    data = work / f"data-seed{seed}"
    if not (data / "test.npz").exists():
        pop = digits_population(cfg.clients, cfg.partition, cfg.seed, cfg.test_fraction)
        train, _ = load_digits_split(cfg.test_fraction, cfg.seed)
        data.mkdir(parents=True, exist_ok=True)
        for i, vc in enumerate(pop.clients):
            save_npz(data / f"client-{i:04d}.npz", subset(train, vc.indices))
        save_npz(data / "test.npz", pop.test)
    return {"clients": cfg.clients, "epochs": cfg.local_epochs, "batch": cfg.batch_size, "lr": cfg.lr,
            "seed": cfg.seed, "artifacts": str(art), "data": str(data)}


def fedort_trial(variant: str, seed: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "fedort", "simulate", str(SCENARIO), "--out", str(out), "--no-progress",
               "--rounds", str(rounds), "--seed", str(seed), *fedort_flags(variant)]
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        wall = time.time() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"fedort simulate failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        metrics = json.loads((out / "metrics.json").read_text())
    return {"wall_s": wall, "accuracy": [r["accuracy"] for r in metrics["rounds"]], "command": " ".join(cmd[2:])}


# Flower's side: bench_vs_flower_task's harness with the strategy and FedProx's client step swapped in.
FLOWER_TASK = task_bench.FLOWER_TASK
for old, new in (
    ("from flwr.server.strategy import FedAvg",
     "from flwr.server.strategy import FedAdam, FedProx, FedYogi\n"
     "from fedort.edge_client.fedprox import proximal_step"),
    ("rounds, clients, cpus, epochs, batch, seed = (int(a) for a in sys.argv[2:8])\nlr = float(sys.argv[8])",
     "rounds, clients, cpus, epochs, batch, seed = (int(a) for a in sys.argv[2:8])\nlr = float(sys.argv[8])\n"
     "spec = json.loads(sys.argv[9])\nart_dir, data_dir = Path(spec['artifacts']), Path(spec['data'])"),
    ('TrainingSession.from_artifacts(work / "artifacts",', "TrainingSession.from_artifacts(art_dir,"),
    ('ClientData.load(work / "flower-data" / f"client-{cid:04d}.npz")', 'ClientData.load(data_dir / f"client-{cid:04d}.npz")'),
    ('np.load(work / "flower-data" / "test.npz")', 'np.load(data_dir / "test.npz")'),
    ("        s.from_buffer(np.ascontiguousarray(parameters[0], dtype=np.float32))\n        s.reset_optimizer_state()",
     "        center = np.ascontiguousarray(parameters[0], dtype=np.float32)\n"
     "        s.from_buffer(center)\n        s.reset_optimizer_state()"),
    ("progress=False)\n        result",
     "progress=False,\n                          optimizer_step=proximal_step(s, center, float(config.get('proximal_mu', 0.0))))\n"
     "        result"),
    ("class TimedFedAvg(FedAvg):",
     "Base = {'fedadam': FedAdam, 'fedyogi': FedYogi, 'fedprox': FedProx}[spec['variant']]\n\n"
     "class TimedFedAvg(Base):"),
    ("initial_parameters=ndarrays_to_parameters([initial]))",
     "initial_parameters=ndarrays_to_parameters([initial]), **spec['strategy'])"),
):
    if old not in FLOWER_TASK:
        raise RuntimeError(f"bench_vs_flower_task.FLOWER_TASK changed; cannot find {old!r}")
    FLOWER_TASK = FLOWER_TASK.replace(old, new, 1)


def flower_strategy(variant: str) -> dict:
    if variant == "fedprox":
        return {"proximal_mu": PROX_MU}
    return {"eta": SERVER["lr"], "beta_1": SERVER["beta1"], "beta_2": SERVER["beta2"], "tau": SERVER["tau"]}


def flower_trial(py: Path, variant: str, task: dict, rounds: int, cpus: int) -> dict:
    script = WORK / "flower_fedopt_task.py"
    script.write_text(FLOWER_TASK)
    spec = {"variant": variant, "strategy": flower_strategy(variant), "artifacts": task["artifacts"], "data": task["data"]}
    env = dict(os.environ, RAY_DEDUP_LOGS="0", RAY_ENABLE_UV_RUN_RUNTIME_ENV="0", PYTHONWARNINGS="ignore")
    env.pop("PYTHONPATH", None)
    args = [WORK, rounds, task["clients"], cpus, task["epochs"], task["batch"], task["seed"], task["lr"], json.dumps(spec)]
    t0 = time.time()
    proc = subprocess.run([str(py), str(script), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=1800, cwd=WORK)
    wall = time.time() - t0
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[len("RESULT "):])
            if res.get("client_failures"):
                raise RuntimeError(f"{res['client_failures']} Flower client fits failed:\n{proc.stderr[-3000:]}")
            return {"wall_s": wall, "accuracy": res["accuracy"], "flwr": res["flwr"], "strategy": spec["strategy"]}
    raise RuntimeError(f"Flower trial failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


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
