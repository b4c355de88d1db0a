"""Round overhead: fedort's real coordinator + EdgeClients vs Flower's simulation, clients doing no training.

Both sides run 10 clients that train nothing and return the global vector (P float32 values,
5 k and 5 M by default), FedAvg over all 10 every round; what is left of a round is the
framework's own overhead: task dispatch, vector transfer, aggregation, durability, export.
Trials alternate fedort / Flower (ABBA per size), each in its own subprocess, in one run.

fedort side: the simulation's public machinery — the deployment `Coordinator` in a thread of the
trial process (`fedort.simulations.LocalCoordinator`), 2 spawned worker processes hosting 5
`EdgeClient`s each (`fedort.simulations.run_worker`), talking over loopback gRPC while the vectors
pass as files in the state dir (the co-located vector path, `fedort simulate`'s default; updates
below `local_file_min_bytes`, e.g. the 5 k ones, stream and are kept inline in their rows; `--with-stream`
adds trials that stream every vector over gRPC, the deployed path, in the same run); phase times come from
the round transitions the coordinator records (`LocalCoordinator.timeline()`). The model
is the built-in MLP with a hidden width that gives ~P parameters (`mlp(hidden=h)` has 75 h + 10).
"No training" uses the public hooks: `EdgeConfig.module_factory` builds a `TrainingModule`
subclass whose `training_step` returns 0 without calling ORT, and whose `session` attribute is a
view of the shared session that turns `optimizer_step` / `lazy_reset_grad` into no-ops (the
Trainer calls those through `module.session`), so a FIT is `from_buffer` + one empty batch +
`to_buffer`. Each client holds one example; `reset_optimizer=False` (no ORT checkpoint reload);
no server-side eval data (`WorkerPlan.module_factory`, one digits row per client). Everything else is
what `fedort simulate` runs by default: the coordinator exports round-N/model.onnx every round
(export_every = 1, in the background), state on disk with every update fsynced before it is
acknowledged; the workers hold one PollTasks long-poll each and upload while the next client trains.

Flower side: `flwr.simulation.run_simulation` (flwr 1.42, Ray backend, 1 CPU per client so 2
actors on 2 cores, like fedort's 2 workers) with 10 `NumPyClient`s whose `fit` returns the
received ndarray unchanged, the legacy `FedAvg` strategy (fraction_fit 1, fraction_evaluate 0,
initial parameters given, no server eval); both from flower_echo.py. It runs in benchmarks/.work/venv-flwr (kept apart from
fedort's dev venv; see flower_venv.py), created/extended with flwr[simulation] on first use.

Per-round time = median interval between consecutive round starts (fedort: the coordinator's
TRAINING transitions; Flower: `configure_fit` calls), over the steady rounds (round 1, with
joins and first downloads, excluded). Since clients do nothing, that interval is the overhead.

    python benchmarks/bench_round_overhead.py                 # 5 k and 5 M, 2 ABBA pairs, ~3 min
    python benchmarks/bench_round_overhead.py --quick         # 5 k only, 1 pair
    python benchmarks/bench_round_overhead.py --with-stream   # + fedort with every vector streamed over gRPC
    python benchmarks/bench_round_overhead.py --sizes 5000 --pairs 3 --rounds 30
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
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
WORK = HERE / ".work" / "round-overhead"
sys.path.insert(0, str(HERE))


# ---------------------------------------------------------------------------------------------
# fedort trial (runs in its own process: python bench_round_overhead.py --_fedort-trial ...)
# ---------------------------------------------------------------------------------------------

def hidden_for(params: int) -> int:
    """The MLP hidden width whose parameter count (75 h + 10) is closest to `params`."""
    return max(1, round((params - 10) / 75))


def _no_training_module(session):
    """module_factory: a TrainingModule that runs no ORT step (see the module docstring)."""
    from fedort.edge_client.training.module import TrainingModule

    class _NoSteps:
        """The session as the Trainer sees it through module.session, minus the optimizer work."""

        def __init__(self, inner):
            self._inner = inner

        def optimizer_step(self) -> None:
            pass

        def lazy_reset_grad(self) -> None:
            pass

        def __getattr__(self, name):
            return getattr(self._inner, name)

    class NoTraining(TrainingModule):
        def __init__(self, s):
            super().__init__(s)
            self.session = _NoSteps(s)

        def training_step(self, batch, batch_idx):
            return 0.0

    return NoTraining(session)


def wait_for_run(server, jobs, timeout_s: float) -> None:
    """Until the run is over or `timeout_s` passed; a worker that failed raises its error here at once
    (its job would otherwise hold its exception until the coordinator gave up waiting for its clients)."""
    deadline = time.monotonic() + timeout_s
    while not server.done and time.monotonic() < deadline:
        server.wait(timeout=0.5)
        for job in jobs:
            if job.ready() and not job.successful():
                job.get()


def _noop_worker(plan) -> dict:
    """A simulation worker (`fedort.simulations.run_worker`) whose EdgeClients do no training; its CPU time."""
    from fedort.simulations import run_worker

    cpu0 = time.process_time()
    stats = run_worker(plan)
    return {"polls": stats.polls, "cpu_s": time.process_time() - cpu0}


def fedort_trial(params: int, rounds: int, clients: int, workers: int, state_root: Path | None = None,
                 stream: bool = False, digests: tuple[str, ...] | None = None) -> dict:
    """One fedort run; returns per-round starts and a breakdown of where a round's time went."""
    import numpy as np

    from fedort.coordinator import CoordinatorConfig
    from fedort.ort.artifacts import build_artifacts, load_manifest
    from fedort.ort.models import mlp
    from fedort.simulations import LocalCoordinator, WorkerPlan
    from fedort.simulations.population import DataSource, VirtualClient, client_id

    hidden = hidden_for(params)
    art = WORK / f"artifacts-h{hidden}"
    manifest = load_manifest(art) if (art / "manifest.json").exists() else build_artifacts(mlp(hidden=hidden), art)
    with tempfile.TemporaryDirectory(dir=WORK) as tmp, tempfile.TemporaryDirectory(dir=state_root or WORK) as st:
        state_dir = Path(st) / "state"
        # as simulations.runner.coordinator_config: loopback plaintext, open joins, no rate limit
        ccfg = CoordinatorConfig.from_mapping(dict(
            artifacts=art, state_dir=state_dir, address="127.0.0.1:0", rounds=rounds,
            min_clients=clients, min_available_clients=clients, fraction=1.0, round_timeout_s=300,
            local_epochs=1, batch_size=1, lr=0.01, reset_optimizer=False, seed=0, client_timeout_s=0,
            insecure=True, auth="open", submissions_per_minute=0,
            **({} if digests is None else {"update_digests": digests})))
        source = DataSource("digits")                     # each client holds one example (row 0)
        ids = [VirtualClient(client_id(i), indices=np.array([0])) for i in range(clients)]
        t0, cpu0 = time.time(), time.process_time()
        with LocalCoordinator(ccfg, local_vectors=not stream) as server:   # simulate's default: vectors as files
            plans = [WorkerPlan(server.address, Path(tmp) / f"cache-{w}", source, tuple(ids[w::workers]),
                                timeout_s=600.0, module_factory=_no_training_module) for w in range(workers)]
            ctx = multiprocessing.get_context("spawn")
            with ctx.Pool(workers) as pool:
                jobs = [pool.apply_async(_noop_worker, (plan,)) for plan in plans]
                wait_for_run(server, jobs, 900)
                worker_stats = [j.get(timeout=120) for j in jobs]
        wall, cpu = time.time() - t0, time.process_time() - cpu0
        timeline = server.timeline()
        accepted = _accepted_times(state_dir, rounds)
    return {"side": "stream" if stream else "fedort", "params": manifest.parameter_count, "hidden": hidden, "rounds": rounds,
            "wall_s": wall, "polls": sum(s["polls"] for s in worker_stats),
            "coordinator_cpu_s": cpu, "worker_cpu_s": sum(s["cpu_s"] for s in worker_stats),
            **_fedort_breakdown(timeline, accepted, rounds)}


def _accepted_times(state_dir: Path, rounds: int) -> dict[int, list[float]]:
    """Unix times at which each round's updates were acknowledged (the submissions' received_ms)."""
    from fedort.coordinator.state.store import StateStore

    store = StateStore(state_dir, readonly=True)
    try:
        return {r: [s.received_ms / 1000 for s in store.submissions(r)] for r in range(1, rounds + 1)}
    finally:
        store.close()


def _fedort_breakdown(timeline, accepted: dict[int, list[float]], rounds: int) -> dict:
    """Round starts and per-phase durations from the coordinator's recorded round transitions."""
    from fedort.common.round_state import RoundState

    TRAINING, AGGREGATING, EXPORTING = (s.name for s in (RoundState.TRAINING, RoundState.AGGREGATING,
                                                         RoundState.EXPORTING))
    AFTER_EXPORT = [s.name for s in (RoundState.WAITING_FOR_CLIENTS, RoundState.EVALUATING, RoundState.DONE)]
    phase: dict[int, dict[str, float]] = {}
    for t in timeline:
        phase.setdefault(t.round, {}).setdefault(t.to_state, t.at_unix_s)
    starts = [phase[r][TRAINING] for r in sorted(phase) if TRAINING in phase[r]]
    # TRAINING -> AGGREGATING (clients fetch, "train", upload; updates made durable and folded),
    # AGGREGATING -> EXPORTING (aggregate, sha256, vector file fsync, SQLite commit),
    # EXPORTING -> next state (inference model export + fsync + model.json), -> next TRAINING.
    # Transitions carry the engine's round number, which moves to r+1 inside the commit:
    # "round r: TRAINING -> AGGREGATING -> EXPORTING", then "round r+1: EXPORTING -> WAITING_FOR_CLIENTS
    # -> TRAINING" (or EVALUATING / DONE after the last round).
    dur = {"train_phase": [], "first_update": [], "last_update_to_close": [], "commit": [], "export": [],
           "reopen": []}
    for r in range(2, rounds + 1):
        p, nxt = phase.get(r, {}), phase.get(r + 1, {})
        if not {TRAINING, AGGREGATING, EXPORTING} <= set(p):
            continue
        dur["train_phase"].append(p[AGGREGATING] - p[TRAINING])
        if accepted.get(r):   # received_ms has millisecond resolution
            dur["first_update"].append(min(accepted[r]) - p[TRAINING])
            dur["last_update_to_close"].append(p[AGGREGATING] - max(accepted[r]))
        dur["commit"].append(p[EXPORTING] - p[AGGREGATING])
        after = next((nxt[s] for s in AFTER_EXPORT if s in nxt), None)
        if after is not None:
            dur["export"].append(after - p[EXPORTING])
            if TRAINING in nxt:
                dur["reopen"].append(nxt[TRAINING] - after)
    med = {k: (statistics.median(v) if v else None) for k, v in dur.items()}
    return {"starts": starts, "phases_s": med}


# ---------------------------------------------------------------------------------------------
# Flower trial (runs under the Flower venv's python)
# ---------------------------------------------------------------------------------------------

FLOWER_TRIAL = textwrap.dedent('''
    import json, sys, time
    params, rounds, clients, cpus = (int(a) for a in sys.argv[1:5])
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.simulation import run_simulation
    from flower_echo import echo_client_app, timed_fedavg

    starts, ends = [], []

    def server_fn(context):
        strategy = timed_fedavg(params, clients, starts, ends)
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=rounds))

    t0 = time.time()
    run_simulation(server_app=ServerApp(server_fn=server_fn), client_app=echo_client_app(),
                   num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": cpus, "num_gpus": 0.0}})
    import flwr
    print("RESULT " + json.dumps({"side": "flower", "params": params, "rounds": rounds, "wall_s": time.time() - t0,
                                  "starts": starts, "ends": ends, "flwr": flwr.__version__}))
''')


def flower_trial(py: Path, params: int, rounds: int, clients: int, cpus: int) -> dict:
    import flower_venv

    return flower_venv.run_trial(py, WORK / "flower_trial.py", FLOWER_TRIAL, [params, rounds, clients, cpus], 900)


def run_fedort(params: int, rounds: int, clients: int, workers: int, state_root: Path | None = None,
               stream: bool = False, digests: str | None = None) -> dict:
    extra = (["--state-root", str(state_root)] if state_root else []) + (["--_stream"] if stream else []) + \
        ([f"--update-digests={digests}"] if digests is not None else [])
    proc = subprocess.run([sys.executable, __file__, "--_fedort-trial", str(params), str(rounds), str(clients),
                           str(workers), *extra], capture_output=True, text=True, timeout=900, cwd=ROOT)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"fedort trial failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


# ---------------------------------------------------------------------------------------------
# driver
# ---------------------------------------------------------------------------------------------

def per_round(starts: list[float]) -> float:
    """Median interval between consecutive round starts, round 1 excluded (joins, first downloads)."""
    gaps = [b - a for a, b in zip(starts[1:], starts[2:])]
    if not gaps:
        gaps = [b - a for a, b in zip(starts, starts[1:])]
    return statistics.median(gaps)


def _fmt_ms(x) -> str:
    return "–" if x is None else f"{1000 * x:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--sizes", type=int, nargs="+", default=[5_000, 5_000_000],
                    help="vector sizes in float32 values (default 5000 5000000)")
    ap.add_argument("--rounds", type=int, default=20, help="rounds per trial for vectors < 1 M values (default 20)")
    ap.add_argument("--rounds-large", type=int, default=6, help="rounds per trial for vectors >= 1 M (default 6)")
    ap.add_argument("--pairs", type=int, default=2, help="ABBA pairs per size (default 2; a pair is fedort, Flower, Flower, fedort)")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2, help="fedort worker processes (default 2)")
    ap.add_argument("--flower-cpus", type=int, default=1, help="Ray CPUs per Flower client (default 1: 2 actors on 2 cores)")
    ap.add_argument("--no-flower", action="store_true", help="fedort only (no Flower venv needed)")
    ap.add_argument("--quick", action="store_true", help="5 k values only, 1 pair, 10 rounds")
    ap.add_argument("--json", type=Path, help="also write all trials to this file")
    ap.add_argument("--state-root", type=Path,
                    help="where the coordinator's state dir goes (default benchmarks/.work; /dev/shm shows what "
                         "the fsyncs cost, since tmpfs makes them no-ops)")
    ap.add_argument("--with-stream", action="store_true",
                    help="also run fedort with every vector streamed over gRPC (simulate --no-local-vectors, the "
                         "deployed path) in the same ABBA order")
    ap.add_argument("--update-digests", help="fedort: the coordinator's update_digests, comma-separated ('' = sha256 "
                    "only, as before protocol 1.3; default: the config's default, blake3)")
    ap.add_argument("--_fedort-trial", nargs=4, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--_stream", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)

    if args._fedort_trial:
        p, r, c, w = args._fedort_trial
        dg = None if args.update_digests is None else tuple(d for d in args.update_digests.split(",") if d)
        print("RESULT " + json.dumps(fedort_trial(p, r, c, w, args.state_root, args._stream, dg)), flush=True)
        return 0

    if args.quick:
        args.sizes, args.pairs, args.rounds = [5_000], 1, 10
    py = None
    if not args.no_flower:
        import flower_venv
        py = flower_venv.ensure(extra=("flwr[simulation]",), probe="import flwr, ray")
    load = os.getloadavg()
    print(f"# {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    trials = []
    for size in args.sizes:
        rounds = args.rounds if size < 1_000_000 else args.rounds_large
        order = ["fedort", "flower", "flower", "fedort"] * args.pairs
        if args.no_flower:
            order = ["fedort"] * (2 * args.pairs)
        if args.with_stream:
            order = [x for side in order for x in ((side, "stream") if side == "fedort" else (side,))]
        for side in order:
            t = time.time()
            if side in ("fedort", "stream"):
                res = run_fedort(size, rounds, args.clients, args.workers, args.state_root, side == "stream",
                                 args.update_digests)
            else:
                res = flower_trial(py, hidden_for(size) * 75 + 10, rounds, args.clients, args.flower_cpus)
            res["per_round_s"] = per_round(res["starts"])
            res["size"] = size
            res["load1"] = os.getloadavg()[0]
            trials.append(res)
            extra = ""
            if side != "flower":
                ph = res["phases_s"]
                extra = (f"  [train phase {_fmt_ms(ph['train_phase'])} ms (first update after "
                         f"{_fmt_ms(ph['first_update'])}, close {_fmt_ms(ph['last_update_to_close'])} after the last), commit {_fmt_ms(ph['commit'])} ms, "
                         f"export {_fmt_ms(ph['export'])} ms, reopen {_fmt_ms(ph['reopen'])} ms; CPU per round: coordinator "
                         f"{1000 * res['coordinator_cpu_s'] / rounds:.0f} ms, workers {1000 * res['worker_cpu_s'] / rounds:.0f} ms]")
            print(f"{side:6s} P={res['params']:>9,d} rounds={rounds:3d}  per round {1000 * res['per_round_s']:8.1f} ms  "
                  f"({1 / res['per_round_s']:6.2f} rounds/s)  trial wall {res['wall_s']:5.1f} s  "
                  f"(took {time.time() - t:4.1f} s){extra}", flush=True)

    print()
    print("| params | fedort ms/round | streamed ms/round | Flower ms/round | fedort / Flower | streamed / Flower | target |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size in args.sizes:
        med = {side: statistics.median(v) if (v := [t["per_round_s"] for t in trials if t["size"] == size
                                                     and t["side"] == side]) else None
               for side in ("fedort", "stream", "flower")}
        target = 0.10 if size < 1_000_000 else 0.33     # issue 12
        w = med["flower"]
        ratios = [f"{m / w:.3f}" if m is not None and w else "–" for m in (med["fedort"], med["stream"])]
        verdict = "–" if not w else ("met" if med["fedort"] / w <= target else "not met")
        print(f"| {size:,} | {_fmt_ms(med['fedort'])} | {_fmt_ms(med['stream'])} | {_fmt_ms(w)} | {ratios[0]} | "
              f"{ratios[1]} | ≤ {target:.2f}: {verdict} |")
    if args.json:
        args.json.write_text(json.dumps(trials, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
