"""The privacy/utility curve of DP-FedAvg on digits: test accuracy against ε (δ = 1e-5), per noise multiplier.

Each run is an ordinary `fedort simulate` (`run_simulation`) with central DP (`--dp-clip C
--dp-noise-multiplier z`), N virtual clients, K per round (q = K/N); every round's `epsilon` comes
from the coordinator's accountant (metrics.json), the accuracy from the coordinator's evaluation
of each round's model on the held-out test split. A run without DP gives the reference line.

    python benchmarks/bench_privacy_utility.py                          # 1000 clients, 100/round, 30 rounds
    python benchmarks/bench_privacy_utility.py --clients 200 --per-round 20 --rounds 15 --z 0.7 1.5
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / ".work" / "privacy-utility"


def run(clients: int, per_round: int, rounds: int, partition: str, z: float | None, clip: float,
        lr: float, epochs: int, seed: int) -> dict:
    from fedort.simulations.config import SimulationConfig
    from fedort.simulations.runner import run_simulation

    tag = f"{partition.replace(':', '')}-{'nodp' if z is None else f'z{z:g}'}"
    out = WORK / tag
    shutil.rmtree(out, ignore_errors=True)
    dp = {} if z is None else {"dp_clip": str(clip), "dp_noise_multiplier": z, "dp_delta": 1e-5}
    cfg = SimulationConfig(clients=clients, clients_per_round=per_round, rounds=rounds, partition=partition,
                           local_epochs=epochs, lr=lr, batch_size=16, seed=seed, out=out, progress=False, **dp)
    t0 = time.time()
    result = run_simulation(cfg)
    return {"partition": partition, "z": z, "clip": clip if z is not None else None, "seconds": round(time.time() - t0, 1),
            "rounds": [{"round": r.round, "accuracy": r.accuracy, "epsilon": r.metrics.get("epsilon")}
                       for r in result.records]}


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in results:
        pts = [(x["epsilon"], x["accuracy"]) for x in r["rounds"] if x["accuracy"] is not None]
        if r["z"] is None:
            ax.axhline(max(a for _, a in pts), color="gray", ls="--", label=f"no DP ({r['partition']})")
        else:
            ax.plot([e for e, _ in pts], [a for _, a in pts], marker=".", label=f"z = {r['z']:g} ({r['partition']})")
    ax.set_xscale("log")
    ax.set_xlabel("ε (δ = 1e-5), after each round")
    ax.set_ylabel("test accuracy")
    ax.set_title("DP-FedAvg on digits: accuracy vs ε")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--z", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--partitions", nargs="+", default=["iid"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=HERE / "privacy_utility.png")
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    results = []
    for partition in args.partitions:
        for z in [None, *args.z]:
            r = run(args.clients, args.per_round, args.rounds, partition, z, args.clip, args.lr, args.epochs, args.seed)
            results.append(r)
            last = r["rounds"][-1]
            print(json.dumps({k: v for k, v in r.items() if k != "rounds"} | {"final": last}), flush=True)
    (WORK / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out)
    print(f"\n| partition | z | ε after 10 | acc after 10 | ε after {args.rounds} | acc after {args.rounds} | best acc |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        rows = r["rounds"]
        mid = rows[min(9, len(rows) - 1)]
        eps = lambda x: "∞ (no DP)" if x["epsilon"] is None else f"{x['epsilon']:.2f}"  # noqa: E731
        best = max(x["accuracy"] for x in rows if x["accuracy"] is not None)
        print(f"| {r['partition']} | {'—' if r['z'] is None else r['z']} | {eps(mid)} | {mid['accuracy']:.3f} | "
              f"{eps(rows[-1])} | {rows[-1]['accuracy']:.3f} | {best:.3f} |")
    print(f"\nplot: {args.out}")


if __name__ == "__main__":
    main()
