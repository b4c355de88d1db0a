"""The cost of secure aggregation in a real round: fedort's coordinator + EdgeClients doing no training,
with and without `--secagg`, over loopback gRPC.

Same machinery as bench_round_overhead.py (LocalCoordinator in this process, 2 spawned
`run_worker` processes hosting the clients, a TrainingModule that runs no ORT step), with the
whole cohort selected every round. Per-round time = median interval between consecutive round
starts (the TRAINING transitions), rounds 2.. (round 1 has joins and first downloads). Under
--secagg a worker runs its selected clients concurrently (a phase closes only when the cohort
got there); without it, one after the other, as the simulation does.

Bytes: `upload/client` is the update payload (4·P plain, 8·(P+1) masked, from the spool, kept
with keep_spool); `protocol state` is the size of the round's recorded protocol state
(`secagg/round-N.state` + `.sealed`: public keys, every sealed share, the unmask responses) — each sealed
share crosses the wire twice (up to the coordinator, down to its recipient), so protocol
traffic is about twice that. `phase_s` = median time in each recorded state/phase (rounds 2..).
Coordinator CPU is the trial process's CPU time (the coordinator runs in a thread there; the
workers' CPU is reported apart). Every trial runs in a fresh process, so its peak RSS
(`ru_maxrss`) is the coordinator's: `coord_rss_mb` is that peak, `coord_rss_growth_mb` the peak
minus the RSS just before the coordinator started (imports and artifacts loaded) — what serving
the rounds cost in memory. Trials alternate plain / secagg, then secagg / plain (ABBA) per cell.

    python benchmarks/bench_secagg_round.py                       # cohorts 10 50 100 x 5k 100k
    python benchmarks/bench_secagg_round.py --cohorts 10 --sizes 5000 --rounds 3
    python benchmarks/bench_secagg_round.py --cohorts 10 --sizes 100000 1000000 --pairs 1   # memory vs P
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_round_overhead import WORK as _RO_WORK, _no_training_module, _noop_worker, hidden_for, wait_for_run  # noqa: E402

WORK = HERE / ".work" / "secagg-round"


def trial(params: int, clients: int, rounds: int, secagg: bool, workers: int = 2) -> dict:
    import numpy as np

    from fedort.coordinator import CoordinatorConfig
    from fedort.ort.artifacts import build_artifacts, load_manifest
    from fedort.ort.models import mlp
    from fedort.simulations import LocalCoordinator, WorkerPlan
    from fedort.simulations.population import DataSource, VirtualClient, client_id

    WORK.mkdir(parents=True, exist_ok=True)
    hidden = hidden_for(params)
    art = _RO_WORK / f"artifacts-h{hidden}"
    manifest = load_manifest(art) if (art / "manifest.json").exists() else build_artifacts(mlp(hidden=hidden), art)
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        state_dir = Path(tmp) / "state"
        ccfg = CoordinatorConfig.from_mapping(dict(
            artifacts=art, state_dir=state_dir, address="127.0.0.1:0", rounds=rounds,
            min_clients=clients, min_available_clients=clients, fraction=1.0, round_timeout_s=600,
            local_epochs=1, batch_size=1, lr=0.01, reset_optimizer=False, seed=0, client_timeout_s=0,
            insecure=True, auth="open", submissions_per_minute=0, keep_spool=True, secagg=secagg))
        source = DataSource("digits")
        ids = [VirtualClient(client_id(i), indices=np.array([0])) for i in range(clients)]
        rss0 = _rss_mb()
        t0, cpu0 = time.time(), time.process_time()
        with LocalCoordinator(ccfg) as server:
            plans = [WorkerPlan(server.address, Path(tmp) / f"cache-{w}", source, tuple(ids[w::workers]),
                                timeout_s=1800.0, module_factory=_no_training_module) for w in range(workers)]
            with multiprocessing.get_context("spawn").Pool(workers) as pool:
                jobs = [pool.apply_async(_noop_worker, (plan,)) for plan in plans]
                wait_for_run(server, jobs, 1800)
                worker_stats = [j.get(timeout=300) for j in jobs]
            outcome = server.outcome
        wall, cpu = time.time() - t0, time.process_time() - cpu0
        timeline = server.timeline()
        starts = sorted(t.at_unix_s for t in timeline if t.to_state == "TRAINING")
        phases: dict[str, list[float]] = {}      # time from each recorded transition to the next, rounds 2..
        for a, b in zip(timeline, timeline[1:]):       # secagg phases are noted inside TRAINING
            if a.round >= 2 and b.round == a.round:
                name = a.to_state if a.to_state.startswith("SECAGG") else b.from_state
                phases.setdefault(name, []).append(b.at_unix_s - a.at_unix_s)
        spool = sorted((state_dir / "spool").rglob("*.f32"))
        upload = spool[0].stat().st_size if spool else None
        protocol = sorted((state_dir / "secagg").glob("*.state")) if secagg else []
        protocol_bytes = sum(p.stat().st_size for p in (protocol[-1], protocol[-1].with_suffix(".sealed"))
                             if p.is_file()) if protocol else 0
    per_round = [b - a for a, b in zip(starts[1:], starts[2:])]     # rounds 2.. (needs rounds >= 3)
    return {"params": manifest.parameter_count, "clients": clients, "secagg": secagg, "rounds": rounds,
            "state": outcome.state.name if outcome else "?", "wall_s": round(wall, 2),
            "round_s": round(statistics.median(per_round), 3) if per_round else None,
            "coordinator_cpu_s": round(cpu, 2), "worker_cpu_s": round(sum(s["cpu_s"] for s in worker_stats), 2),
            "upload_bytes_per_client": upload, "protocol_state_bytes": protocol_bytes,
            "coord_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "coord_rss_growth_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss0, 1),
            "phase_s": {k: round(statistics.median(v), 3) for k, v in phases.items()}}


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def run_trial(params: int, clients: int, rounds: int, secagg: bool) -> dict:
    """`trial` in a fresh process (so its peak RSS is this trial's), plus the load average around it."""
    load0 = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, __file__, "--_trial", str(params), str(clients), str(rounds), str(int(secagg))],
                          capture_output=True, text=True, timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT "):]), load=round((load0 + os.getloadavg()[0]) / 2, 1))
    raise RuntimeError(f"trial failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


def _median(rows: list[dict], key: str):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cohorts", type=int, nargs="+", default=[10, 50, 100])
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 100_000])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=1, help="ABBA pairs per cell (plain, secagg, secagg, plain)")
    ap.add_argument("--out", type=Path, default=WORK / "results.json")
    ap.add_argument("--_trial", nargs=4, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._trial:
        p, n, r, s = args._trial
        print("RESULT " + json.dumps(trial(p, n, r, bool(s))), flush=True)
        return
    results = []
    for size in args.sizes:
        for n in args.cohorts:
            for _ in range(args.pairs):
                for secagg in (False, True, True, False):
                    r = run_trial(size, n, args.rounds, secagg)
                    results.append(r)
                    print(json.dumps(r), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print("\n| P | cohort | plain s/round | secagg s/round | ratio | upload B/client plain → secagg | protocol state B "
          "| coord. peak RSS MB plain / secagg (growth) | load |")
    print("| ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: |")
    for size in args.sizes:
        for n in args.cohorts:
            cell = [r for r in results if r["clients"] == n and abs(r["params"] - size) < size * 0.05]
            p, s = ([r for r in cell if r["secagg"] is sa] for sa in (False, True))
            pr, sr = _median(p, "round_s"), _median(s, "round_s")
            ratios = sorted(b["round_s"] / a["round_s"] for a, b in zip(p, s) if a["round_s"] and b["round_s"])
            spread = f" ({ratios[0]:.2f}–{ratios[-1]:.2f})" if len(ratios) > 1 else ""
            print(f"| {p[0]['params']} | {n} | {pr:.3f} | {sr:.3f} | {sr / pr:.2f}×{spread} | "
                  f"{p[0]['upload_bytes_per_client']} → {s[0]['upload_bytes_per_client']} | {s[0]['protocol_state_bytes']} | "
                  f"{_median(p, 'coord_rss_mb'):.0f} / {_median(s, 'coord_rss_mb'):.0f} "
                  f"(+{_median(p, 'coord_rss_growth_mb'):.0f} / +{_median(s, 'coord_rss_growth_mb'):.0f}) | "
                  f"{_median(cell, 'load'):.1f} |")


if __name__ == "__main__":
    main()
