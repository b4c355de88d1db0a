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
  `evaluate_fn`), and a `NumPyClient` whose `fit` is fedort's ORT training itself:
  `TrainingSession.from_buffer` + `reset_optimizer_state`, `Trainer(max_epochs=E, batch_size=B,
  shuffle=True, seed=...)` on a `TrainingModule`, `to_buffer` — the modules behind
  `edge_client.local_round.fit` (which itself cannot be imported there: it pulls in fedort's
  protobuf-7 wire types, and flwr pins protobuf<7). Same artifacts, same initial vector, the same
  client partitions (fedort's partitioner with the same seed, saved as one .npz per client), the
  same test split, the same ORT thread count (1 per session). fedort is installed in Flower's venv
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
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / ".work" / "vs-flower-task"
SCENARIO = ROOT / "simulations" / "scenarios" / "digits_dirichlet.toml"
sys.path.insert(0, str(HERE))


def prepare(work: Path) -> dict:
    """Artifacts and per-client data exactly as `fedort simulate` builds them for the scenario."""
    from fedort.edge_client.artifacts import build_artifacts, load_manifest
    from fedort.edge_client.models import builtin_model
    from fedort.simulations.config import load_config
    from fedort.simulations.datasets import load_digits_split, save_npz, subset
    from fedort.simulations.artifact_cache import cached_builtin_artifacts
    from fedort.simulations.population import digits_population

    cfg = load_config(SCENARIO, {"progress": False})
    art = work / "artifacts"
    if not (art / "manifest.json").exists():
        build_artifacts(builtin_model(cfg.model, seed=cfg.seed), art, optimizer=cfg.optimizer)
    # as for the digits split below: fedort's runs find the built-in artifacts in the machine's cache, as every
    # run after a machine's first does (the Flower side gets them ready-made)
    with tempfile.TemporaryDirectory() as tmp:
        cached_builtin_artifacts(cfg.model, cfg.seed, cfg.optimizer, Path(tmp) / "artifacts")
    pop = digits_population(cfg.clients, cfg.partition, cfg.seed, cfg.test_fraction)
    train, _ = load_digits_split(cfg.test_fraction, cfg.seed)
    data = work / "flower-data"
    data.mkdir(parents=True, exist_ok=True)
    for i, vc in enumerate(pop.clients):
        save_npz(data / f"client-{i:04d}.npz", subset(train, vc.indices))
    save_npz(data / "test.npz", pop.test)
    return {"clients": cfg.clients, "rounds": cfg.rounds, "epochs": cfg.local_epochs, "batch": cfg.batch_size,
            "lr": cfg.lr, "seed": cfg.seed, "params": load_manifest(art).parameter_count,
            "examples": int(sum(len(vc.indices) for vc in pop.clients))}


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


def fedort_trial(rounds: int) -> dict:
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        out = Path(tmp) / "run"
        t0 = time.time()
        proc = subprocess.run([sys.executable, "-m", "fedort", "simulate", str(SCENARIO), "--out", str(out),
                               "--no-progress", "--rounds", str(rounds)], capture_output=True, text=True, timeout=900)
        wall = time.time() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"fedort simulate failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        metrics = json.loads((out / "metrics.json").read_text())
        from fedort.coordinator.status import round_timeline

        timeline = round_timeline(out / "state")
    starts = [t.at_unix_s for t in timeline if t.to_state == "TRAINING"]
    rounds_s = max(t.at_unix_s for t in timeline) - starts[0]
    acc = [r["accuracy"] for r in metrics["rounds"]]
    return {"side": "fedort", "wall_s": wall, "rounds_s": rounds_s, "accuracy": acc}


FLOWER_TASK = textwrap.dedent('''
    import hashlib, json, sys, time
    t_start = time.time()
    from pathlib import Path
    import numpy as np
    work = Path(sys.argv[1])
    rounds, clients, cpus, epochs, batch, seed = (int(a) for a in sys.argv[2:8])
    lr = float(sys.argv[8])
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import run_simulation
    from fedort.edge_client.client_data import ClientData
    from fedort.edge_client.module import TrainingModule
    from fedort.edge_client.session import TrainingSession
    from fedort.edge_client.session_config import SessionConfig
    from fedort.edge_client.trainer import Trainer

    def session():
        """One ORT session per process (as a fedort worker shares one among its clients); cached on an
        imported module, which cloudpickle ships by reference, so Ray never tries to pickle a session."""
        import fedort.edge_client.session as holder
        if getattr(holder, "_bench_session", None) is None:
            holder._bench_session = TrainingSession.from_artifacts(work / "artifacts",
                                                                   config=SessionConfig(intra_op_threads=1))
        return holder._bench_session

    def client_seed(rnd, cid):
        digest = hashlib.sha256(f"{seed}:{rnd}:client-{cid:04d}".encode()).digest()
        return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)

    class OrtClient(NumPyClient):
        def __init__(self, cid):
            self.cid = cid
            self.data = ClientData.load(work / "flower-data" / f"client-{cid:04d}.npz")

        def fit(self, parameters, config):
            s = session()
            rnd = int(config["server_round"])
            s.from_buffer(np.ascontiguousarray(parameters[0], dtype=np.float32))
            s.reset_optimizer_state()
            module = TrainingModule(s)
            module.lr = lr
            trainer = Trainer(max_epochs=epochs, batch_size=batch, shuffle=True, seed=client_seed(rnd, self.cid),
                              progress=False)
            result = trainer.fit(module, self.data.arrays_for(s.manifest.inputs))
            return [np.array(s.to_buffer(), dtype=np.float32, copy=True)], int(result.num_examples), {}

    test = np.load(work / "flower-data" / "test.npz")
    accuracy, starts, evals, failed = {}, [], [], []

    def evaluate_fn(server_round, parameters, config):
        s = session()
        s.from_buffer(np.ascontiguousarray(parameters[0], dtype=np.float32))
        x, y = test["x"], test["labels"]
        loss_sum, correct = 0.0, 0
        for i in range(0, len(y), 512):
            out = s.eval_step(x[i:i + 512], y[i:i + 512])
            loss_sum += float(out[s.manifest.eval_outputs[0]]) * len(y[i:i + 512])
            correct += int((np.argmax(out["logits"], axis=1) == y[i:i + 512]).sum())
        if server_round > 0:
            accuracy[server_round] = correct / len(y)
            evals.append(time.time())
        return loss_sum / len(y), {"accuracy": correct / len(y)}

    class TimedFedAvg(FedAvg):
        def configure_fit(self, server_round, parameters, client_manager):
            starts.append(time.time())
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results, failures):
            failed.append(len(failures))
            return super().aggregate_fit(server_round, results, failures)

    def client_fn(context: Context):
        return OrtClient(int(context.node_config["partition-id"])).to_client()

    def server_fn(context: Context):
        initial = np.array(session().to_buffer(), dtype=np.float32, copy=True)
        strategy = TimedFedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=clients, min_evaluate_clients=0,
                               min_available_clients=clients, evaluate_fn=evaluate_fn,
                               on_fit_config_fn=lambda r: {"server_round": r},
                               initial_parameters=ndarrays_to_parameters([initial]))
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=rounds))

    run_simulation(server_app=ServerApp(server_fn=server_fn), client_app=ClientApp(client_fn=client_fn),
                   num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": cpus, "num_gpus": 0.0}})
    import flwr
    print("RESULT " + json.dumps({"side": "flower", "wall_s": time.time() - t_start,
                                  "rounds_s": (evals[-1] - starts[0]) if evals and starts else None,
                                  "accuracy": [accuracy.get(r) for r in range(1, rounds + 1)],
                                  "client_failures": sum(failed),
                                  "flwr": flwr.__version__}))
''')


def flower_python() -> Path:
    import flower_venv

    py = flower_venv.ensure(extra=("flwr[simulation]",), probe="import flwr, ray, threadpoolctl")
    probe = "import fedort.edge_client.session"   # (onnxruntime.training itself imports torch)
    if subprocess.run([str(py), "-c", probe], capture_output=True).returncode != 0:
        print("installing onnxruntime-training-cpu and fedort (--no-deps) into Flower's venv", file=sys.stderr)
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", "onnxruntime-training-cpu==1.19.2", "onnx<1.18"],
                       check=True)
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(ROOT)], check=True)
    return py


def flower_trial(py: Path, task: dict, rounds: int, cpus: int) -> dict:
    script = WORK / "flower_task.py"
    script.write_text(FLOWER_TASK)
    env = dict(os.environ, RAY_DEDUP_LOGS="0", RAY_ENABLE_UV_RUN_RUNTIME_ENV="0", PYTHONWARNINGS="ignore")
    env.pop("PYTHONPATH", None)
    args = [str(WORK), rounds, task["clients"], cpus, task["epochs"], task["batch"], task["seed"], task["lr"]]
    t0 = time.time()
    proc = subprocess.run([str(py), str(script), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=1800, cwd=WORK)
    wall = time.time() - t0
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return {**json.loads(line[len("RESULT "):]), "wall_s": wall}
    raise RuntimeError(f"Flower trial failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


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
