"""The privacy/utility curve of DP-FedAvg on digits: test accuracy against ε (δ = 1e-5), per noise multiplier.

Each run is an ordinary `fedort simulate` (`run_simulation`) with central DP (`--dp-clip C
--dp-noise-multiplier z`), N virtual clients, K per round (q = K/N); every round's `epsilon` comes
from the coordinator's accountant (metrics.json), the accuracy from the coordinator's evaluation
of each round's model on the held-out test split. A run without DP gives the reference line.
Dirichlet over 1,000 clients relies on the partitioner's top-up (every client gets >= 1 example).

    python benchmarks/bench_privacy_utility.py                          # 1000 clients, 100/round, 50 rounds, IID + Dirichlet(0.5)
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

    tag = f"{partition.replace(':', '')}-{'nodp' if z is None else f'z{z:g}-c{clip:g}'}"
    out = WORK / tag
    shutil.rmtree(out, ignore_errors=True)
    dp = {} if z is None else {"dp_clip": str(clip), "dp_noise_multiplier": z, "dp_delta": 1e-5}
    cfg = SimulationConfig.from_mapping(dict(clients=clients, clients_per_round=per_round, rounds=rounds, partition=partition,
                           local_epochs=epochs, lr=lr, batch_size=16, seed=seed, out=out, progress=False, **dp))
    t0 = time.time()
    result = run_simulation(cfg)
    return {"partition": partition, "z": z, "clip": clip if z is not None else None, "seconds": round(time.time() - t0, 1),
            "rounds": [{"round": r.round, "accuracy": r.accuracy, "epsilon": r.metrics.get("epsilon")}
                       for r in result.records]}


def plot(results: list[dict], path: Path) -> None:
    """One panel per partition: accuracy after each round against that round's ε, one line per z."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    partitions = list(dict.fromkeys(r["partition"] for r in results))
    clips = sorted({r["clip"] for r in results if r["z"] is not None})
    zs = sorted({r["z"] for r in results if r["z"] is not None})
    styles = ["-", "--", ":", "-."]
    fig, axes = plt.subplots(1, len(partitions), figsize=(5.2 * len(partitions), 4.2), sharey=True, squeeze=False)
    for ax, partition in zip(axes[0], partitions):
        for r in (r for r in results if r["partition"] == partition):
            pts = [(x["epsilon"], x["accuracy"]) for x in r["rounds"] if x["accuracy"] is not None]
            if r["z"] is None:
                ax.axhline(sum(a for _, a in pts[-LAST:]) / len(pts[-LAST:]), color="gray", ls="--",
                           label=f"no DP, rounds {len(pts) - LAST + 1}-{len(pts)}")
            else:
                ax.plot([e for e, _ in pts], [a for _, a in pts], marker=".", ls=styles[clips.index(r["clip"])],
                        color=f"C{zs.index(r['z'])}", label=f"C = {r['clip']:g}, z = {r['z']:g}")
        ax.set_xscale("log")
        ax.set_xlabel("ε (δ = 1e-5) after each round")
        ax.set_title(f"{partition}")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("test accuracy")
    fig.suptitle("DP-FedAvg on digits, 1,000 clients, 100 per round: accuracy vs ε", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


EPSILONS = (1.0, 2.0, 4.0, 8.0)
LAST = 5   # single rounds are noisy: "final" accuracy is the mean over the last LAST rounds


def table(results: list[dict], rounds: int) -> str:
    """Markdown: ε and accuracy after 10 rounds and at the end (mean of the last LAST rounds), and the
    best accuracy of any round whose ε is within each budget."""
    eps = lambda x: "∞" if x["epsilon"] is None else f"{x['epsilon']:.2f}"  # noqa: E731
    head = (f"| partition | C | z | ε after 10 | acc. after 10 | ε after {rounds} | acc. rounds {rounds - LAST + 1}–{rounds} | "
            + " | ".join(f"best acc. at ε ≤ {e:g}" for e in EPSILONS) + " | s |")
    lines = [head, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in EPSILONS) + " | ---: |"]
    for r in results:
        rows = [x for x in r["rounds"] if x["accuracy"] is not None]
        mid = rows[min(9, len(rows) - 1)]
        within = []
        for budget in EPSILONS:
            accs = [x["accuracy"] for x in rows if x["epsilon"] is None or x["epsilon"] <= budget]
            within.append("—" if r["z"] is None or not accs else f"{max(accs):.3f}")
        z = "no DP" if r["z"] is None else f"{r['z']:g}"
        clip = "—" if r["clip"] is None else f"{r['clip']:g}"
        end = sum(x["accuracy"] for x in rows[-LAST:]) / len(rows[-LAST:])
        lines.append(f"| {r['partition']} | {clip} | {z} | {eps(mid)} | "
                     f"{mid['accuracy']:.3f} | {eps(rows[-1])} | {end:.3f} | "
                     + " | ".join(within) + f" | {r['seconds']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--z", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--partitions", nargs="+", default=["iid", "dirichlet:0.5"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-baseline", action="store_true", help="skip the run without DP")
    ap.add_argument("--replot", type=Path, metavar="JSON", nargs="+",
                    help="no runs: redraw the plot and table from these results files")
    ap.add_argument("--out", type=Path, default=HERE / "privacy_utility.png")
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    if args.replot:
        results = [r for f in args.replot for r in json.loads(f.read_text())]
        plot(results, args.out)
        print(table(results, max(len(r["rounds"]) for r in results)))
        return
    results = []
    for partition in args.partitions:
        for z in ([] if args.no_baseline else [None]) + args.z:
            r = run(args.clients, args.per_round, args.rounds, partition, z, args.clip, args.lr, args.epochs, args.seed)
            results.append(r)
            last = r["rounds"][-1]
            print(json.dumps({k: v for k, v in r.items() if k != "rounds"} | {"final": last}), flush=True)
    (WORK / f"{args.out.stem}.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out)
    print(table(results, args.rounds))
    print(f"\nplot: {args.out}")


if __name__ == "__main__":
    main()
