"""The README's learning task, fedort against Flower with the same ORT clients: wall time and accuracy per round.

The task (simulations/scenarios/digits_dirichlet.toml): digits, 10 clients, Dirichlet(0.5) label
skew, the built-in MLP with AdamW, E = 2 local epochs, B = 16, lr 0.02, fresh optimizer state each
round, FedAvg over all 10 clients, server-side test accuracy after every round, 30 rounds.

- fedort: `python -m fedort simulate simulations/scenarios/digits_dirichlet.toml --out DIR
  --no-progress`, the command a user types, with its defaults (local backend, one worker process
  per core). Timed from launch to exit: it also makes its artifacts folder (a verified copy from the
  machine's cache, which a machine's first run fills), partitions the data and draws the plot, which
  the Flower side gets ready-made.
- Flower: flwr 1.42 `run_simulation` (Ray backend, 1 CPU per client: 2 actors on the 2 cores,
  like fedort's 2 workers), legacy `FedAvg` (fraction_fit 1, no client eval, server-side
  `evaluate_fn`), and a `NumPyClient` whose `fit` is fedort's ORT training itself (flower_ort.py,
  shared with bench_vs_flower_fedopt.py, which changes only the strategy). Same artifacts, same
  initial vector, the same client partitions (fedort's partitioner with the same seed, saved as one
  .npz per client), the same test split, the same ORT thread count (1 per session). fedort is installed in Flower's venv
  with `pip install --no-deps -e .` plus onnxruntime-training-cpu==1.19.2 and onnx<1.18.
  Timed from launch to exit (imports, Ray start, rounds, shutdown).

Before the trials, fedort's built-in artifacts are put in the machine's cache (as after any first run)
and the fedort checkout gets its bytecode (`compile_sources`: pip compiles Flower's, Ray's and gRPC's
modules when it installs them; an editable checkout in a shell with PYTHONDONTWRITEBYTECODE set would
compile ~150 modules in every fedort process of every trial).

Trials alternate fedort, Flower, Flower, fedort (ABBA) per pair, each in its own subprocess.
Printed: wall time of each trial, the median ratio fedort / Flower, the accuracy after every
round of each side, and the rounds-only time (first round start to last evaluation).

    python benchmarks/bench_vs_flower_task.py                  # 1 ABBA pair (~2-3 min on 2 cores)
    python benchmarks/bench_vs_flower_task.py --pairs 2 --json benchmarks/.work/task.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / ".work" / "vs-flower-task"
SCENARIO = ROOT / "simulations" / "scenarios" / "digits_dirichlet.toml"
sys.path.insert(0, str(HERE))


def prepare(work: Path) -> dict:
    """Artifacts and per-client data exactly as `fedort simulate` builds them for the scenario."""
    from fedort.ort.artifacts import load_manifest
    from fedort.simulations.config import load_config
    from fedort.simulations.artifact_cache import cached_builtin_artifacts

    cfg = load_config(SCENARIO, {"progress": False})
    art = flower_artifacts(cfg, work / "artifacts")
    # as for the digits split below: fedort's runs find the built-in artifacts in the machine's cache, as every
    # run after a machine's first does (the Flower side gets them ready-made)
    with tempfile.TemporaryDirectory() as tmp:
        cached_builtin_artifacts(cfg.model, cfg.seed, cfg.optimizer, Path(tmp) / "artifacts")
    pop = flower_data(cfg, work / "flower-data")
    return {"clients": cfg.clients, "rounds": cfg.rounds, "epochs": cfg.local_epochs, "batch": cfg.batch_size,
            "lr": cfg.lr, "seed": cfg.seed, "params": load_manifest(art).parameter_count,
            "examples": int(sum(len(vc.indices) for vc in pop.clients))}


def flower_artifacts(cfg, art: Path) -> Path:
    """The scenario's built-in model as training artifacts in `art` (built unless already there)."""
    from fedort.ort.artifacts import build_artifacts
    from fedort.ort.models import builtin_model

    if not (art / "manifest.json").exists():
        build_artifacts(builtin_model(cfg.model, seed=cfg.seed), art, optimizer=cfg.optimizer)
    return art


def flower_data(cfg, data: Path):
    """The clients' partitions of the scenario `cfg` (fedort's partitioner, its seed) as data/client-NNNN.npz,
    and its test split as data/test.npz, for the Flower side; returns the population."""
    from fedort.simulations.data.datasets import load_digits_split, save_npz, subset
    from fedort.simulations.population import digits_population

    pop = digits_population(cfg.clients, cfg.partition, cfg.seed, cfg.test_fraction)
    train, _ = load_digits_split(cfg.test_fraction, cfg.seed)
    data.mkdir(parents=True, exist_ok=True)
    for i, vc in enumerate(pop.clients):
        save_npz(data / f"client-{i:04d}.npz", subset(train, vc.indices))
    save_npz(data / "test.npz", pop.test)
    return pop


def compile_sources() -> str:
    """Bytecode for the fedort checkout both sides import from here, written if missing.

    A wheel's modules are compiled when pip installs them (Flower, Ray, gRPC: all are); an editable
    checkout's are compiled on first import, unless PYTHONDONTWRITEBYTECODE is set (as in some CI and
    sandbox shells), and then every process of every trial compiles ~150 fedort modules again."""
    import compileall
    import fedort

    dirs = sorted({Path(m.__file__).resolve().parent for m in _fedort_packages(fedort)})
    ok = all(compileall.compile_dir(str(d), quiet=1) for d in dirs)
    return f"{'compiled' if ok else 'FAILED to compile'} {len(dirs)} fedort source folders under {ROOT}"


def _fedort_packages(fedort) -> list:
    import fedort.coordinator
    import fedort.edge_client
    import fedort.protos
    import fedort.simulations

    return [fedort, fedort.coordinator, fedort.edge_client, fedort.protos, fedort.simulations]


def fedort_trial(rounds: int, flags: Sequence[str] = (), work: Path = WORK) -> dict:
    """`fedort simulate` of the scenario (+ `flags`) in its own process, timed from launch to exit; its accuracy
    per round and the rounds-only time (first TRAINING transition to the last transition)."""
    from fedort.coordinator.status import round_timeline

    with tempfile.TemporaryDirectory(dir=work) as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "fedort", "simulate", str(SCENARIO), "--out", str(out), "--no-progress",
               "--rounds", str(rounds), *flags]
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        wall = time.time() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"fedort simulate failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        metrics = json.loads((out / "metrics.json").read_text())
        timeline = round_timeline(out / "state")
    starts = [t.at_unix_s for t in timeline if t.to_state == "TRAINING"]
    rounds_s = max(t.at_unix_s for t in timeline) - starts[0]
    acc = [r["accuracy"] for r in metrics["rounds"]]
    return {"side": "fedort", "wall_s": wall, "rounds_s": rounds_s, "accuracy": acc, "command": " ".join(cmd[2:])}


def flower_python() -> Path:
    import flower_venv

    py = flower_venv.ensure(extra=("flwr[simulation]",), probe="import flwr, ray, threadpoolctl")
    probe = "import fedort.ort.session"   # (onnxruntime.training itself imports torch)
    if subprocess.run([str(py), "-c", probe], capture_output=True).returncode != 0:
        print("installing onnxruntime-training-cpu and fedort (--no-deps) into Flower's venv", file=sys.stderr)
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", "onnxruntime-training-cpu==1.19.2", "onnx<1.18"],
                       check=True)
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(ROOT)], check=True)
    return py


def flower_trial(py: Path, task: dict, rounds: int, cpus: int) -> dict:
    """Flower's run of the task with FedAvg (flower_ort.py, the harness bench_vs_flower_fedopt shares)."""
    import flower_ort

    spec = {"artifacts": str(WORK / "artifacts"), "data": str(WORK / "flower-data"), "rounds": rounds,
            "clients": task["clients"], "cpus": cpus, "epochs": task["epochs"], "batch": task["batch"],
            "seed": task["seed"], "lr": task["lr"], "strategy": "fedavg"}
    return flower_ort.trial(py, WORK / "flower_task.py", spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=1, help="ABBA pairs (fedort, Flower, Flower, fedort); default 1")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--flower-cpus", type=int, default=1, help="Ray CPUs per Flower client (default 1)")
    ap.add_argument("--no-flower", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    task = prepare(WORK)
    py = None if args.no_flower else flower_python()
    print(f"# {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}; task: {task}")
    print(f"# {compile_sources()} (PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r})")
    trials: list[dict] = []
    for _ in range(args.pairs):
        order = ["fedort"] if py is None else ["fedort", "flower", "flower", "fedort"]
        for side in order:
            load = os.getloadavg()[0]
            t = fedort_trial(args.rounds) if side == "fedort" else flower_trial(py, task, args.rounds, args.flower_cpus)
            t["load_before"] = load
            trials.append(t)
            acc = t["accuracy"] or []
            if t.get("client_failures"):
                print(f"WARNING: {t['client_failures']} Flower client fits failed", file=sys.stderr)
            print(f"{side:7s} wall {t['wall_s']:6.1f} s  rounds {t['rounds_s'] or float('nan'):6.1f} s  "
                  f"load {load:4.1f}  accuracy r10 {acc[9] if len(acc) > 9 else None}  final {acc[-1] if acc else None}",
                  flush=True)
    by = {s: [t for t in trials if t["side"] == s] for s in ("fedort", "flower")}
    med = {s: statistics.median(t["wall_s"] for t in v) for s, v in by.items() if v}
    if "flower" in med:
        print(f"\nwall: fedort {med['fedort']:.1f} s, Flower {med['flower']:.1f} s, ratio {med['fedort'] / med['flower']:.3f} "
              f"(target <= 0.2)")
        rmed = {s: statistics.median(t["rounds_s"] for t in v) for s, v in by.items()}
        print(f"rounds only: fedort {rmed['fedort']:.1f} s, Flower {rmed['flower']:.1f} s, "
              f"ratio {rmed['fedort'] / rmed['flower']:.3f}")
        fa, wa = by["fedort"][0]["accuracy"], by["flower"][0]["accuracy"]
        print("round | fedort acc | Flower acc")
        for r in range(len(fa)):
            print(f"{r + 1:5d} | {fa[r]:.4f} | {wa[r]:.4f}")
    if args.json:
        args.json.write_text(json.dumps({"task": task, "trials": trials}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
