"""Secure aggregation side by side: a fedort `--secagg` round vs Flower 1.42's `SecAggPlusWorkflow`.

Same cohort, same vector size, clients that train nothing, everything on this machine, loopback only.

fedort: `bench_secagg_round.trial` — the deployment coordinator (LocalCoordinator) and 2 spawned
worker processes hosting EdgeClients over loopback gRPC, the whole cohort every round, the
default graph (classic SecAgg up to 17 clients, else K = max(16, 2⌈log2 n⌉ + 4) neighbours) and
threshold T = ⌊K/2⌋ + 1, masked uploads packed to b bits (b = 24..40 here, whole bytes).

Flower: `flwr.simulation.run_simulation` (Ray backend, 1 CPU per client: 2 actors on 2 cores, like
fedort's 2 workers) with `DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(num_shares=K + 1,
reconstruction_threshold=T))` on the server and `secaggplus_mod` on each `ClientApp`, whose
`NumPyClient.fit` returns the received vector unchanged (1 example); legacy `FedAvg`
(fraction_fit 1, no evaluation); both from flower_echo.py. Flower's `num_shares` counts the
client's own share, so K + 1 gives each client the same K neighbours as fedort. Flower's own fixed point: clip 8, 2^22
levels, masks mod 2^32. With `--flower-plain`, Flower's plain FedAvg round is timed as well (its
own secagg / plain ratio).

Per-round time = median interval between consecutive round starts (fedort: TRAINING transitions;
Flower: `configure_fit` calls), rounds 2.. . Trials alternate fedort / Flower / Flower / fedort.

    python benchmarks/bench_secagg_vs_flower.py                                   # 10, 50 x 5 k, 100 k
    python benchmarks/bench_secagg_vs_flower.py --cohorts 100 --sizes 100000 --flower-plain
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_secagg_round import WORK as _ROUND_WORK, run_trial  # noqa: E402

WORK = _ROUND_WORK.parent / "secagg-vs-flower"

FLOWER_TRIAL = textwrap.dedent('''
    import json, sys, time
    params, rounds, clients, shares, threshold, secagg = (int(a) for a in sys.argv[1:7])
    from flwr.client.mod import secaggplus_mod
    from flwr.common import Context
    from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
    from flwr.simulation import run_simulation
    from flower_echo import echo_client_app, timed_fedavg

    starts = []
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = timed_fedavg(params, clients, starts)
        legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=rounds), strategy=strategy)
        fit = SecAggPlusWorkflow(num_shares=shares, reconstruction_threshold=threshold) if secagg else None
        (DefaultWorkflow(fit_workflow=fit) if fit else DefaultWorkflow())(grid, legacy)

    t0 = time.time()
    run_simulation(server_app=server, client_app=echo_client_app((secaggplus_mod,) if secagg else ()),
                   num_supernodes=clients, backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    import flwr
    print("RESULT " + json.dumps({"side": "flower", "params": params, "clients": clients, "secagg": bool(secagg),
                                  "rounds": rounds, "wall_s": time.time() - t0, "starts": starts,
                                  "flwr": flwr.__version__}))
''')


def graph(clients: int) -> tuple[int, int]:
    """fedort's default (K neighbours, threshold T) for this cohort (coordinator.secagg_round)."""
    from fedort.coordinator.privacy.secagg.secure_round import default_degree
    from fedort.common.secagg import default_threshold, effective_degree

    k = effective_degree(clients, default_degree(clients))
    return k, default_threshold(k)


def flower_trial(py: Path, params: int, rounds: int, clients: int, secagg: bool) -> dict:
    import flower_venv

    k, t = graph(clients)
    load0 = os.getloadavg()[0]
    r = flower_venv.run_trial(py, WORK / "flower_secagg_trial.py", FLOWER_TRIAL,
                              [params, rounds, clients, k + 1, t, int(secagg)], 3600)
    gaps = [b - a for a, b in zip(r["starts"][1:], r["starts"][2:])]
    return dict(r, round_s=round(statistics.median(gaps), 3) if gaps else None, K=k, T=t,
                load=round((load0 + os.getloadavg()[0]) / 2, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cohorts", type=int, nargs="+", default=[10, 50])
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 100_000])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=1, help="ABBA pairs per cell (fedort, Flower, Flower, fedort)")
    ap.add_argument("--flower-plain", action="store_true", help="also time Flower's plain FedAvg round")
    ap.add_argument("--out", type=Path, default=WORK / "results.json")
    args = ap.parse_args()
    import flower_venv

    py = flower_venv.ensure(extra=("flwr[simulation]",), probe="import flwr, ray")
    WORK.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in args.sizes:
        for n in args.cohorts:
            for _ in range(args.pairs):
                for side in ("fedort", "flower", "flower", "fedort"):
                    r = run_trial(size, n, args.rounds, True) if side == "fedort" else \
                        flower_trial(py, size, args.rounds, n, True)
                    rows.append(dict(r, side=side))
                    print(json.dumps({k: v for k, v in rows[-1].items() if k != "starts"}), flush=True)
            if args.flower_plain:
                r = flower_trial(py, size, args.rounds, n, False)
                rows.append(dict(r, side="flower-plain"))
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "starts"}), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    print("\n| P | cohort | K / T | fedort secagg s/round | Flower SecAgg+ s/round | fedort / Flower | Flower plain s/round | load |")
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for size in args.sizes:
        for n in args.cohorts:
            cell = [r for r in rows if r["clients"] == n and abs(r["params"] - size) < size * 0.05]
            med = {s: statistics.median([r["round_s"] for r in cell if r["side"] == s and r["round_s"]] or [float("nan")])
                   for s in ("fedort", "flower", "flower-plain")}
            k, t = graph(n)
            plain = f"{med['flower-plain']:.3f}" if args.flower_plain else "–"
            print(f"| {size} | {n} | {k} / {t} | {med['fedort']:.3f} | {med['flower']:.3f} | "
                  f"{med['fedort'] / med['flower']:.2f}× | {plain} | {statistics.median(r['load'] for r in cell)} |")


if __name__ == "__main__":
    main()
