"""Codec accuracy against bytes up THROUGH THE REAL PATH: `fedort simulate` with `--codec`, per seed.

    python benchmarks/bench_codec_simulate.py [--codecs raw,fp16,int8,topk:0.01,topk:0.01@off] [--seeds 0,1,2]
                                              [--rounds 45] [--runs DIR] [--png benchmarks/codec_simulate.png]

Each (codec, seed) is one `fedort simulate simulations/scenarios/digits_dirichlet.toml --rounds R
--seed S --codec C [--topk-warmup W]` run (an entry `C@W` sets the warm-up): real coordinator (admission, spooled payloads, decode into the fold),
real edge clients (delta encoding, top-k error feedback) over loopback gRPC. Runs that already
exist in --runs are reused. Prints the table of benchmarks/README.md "Codecs" (accuracy at round
30 and at the last round, mean of the last 5 rounds, bytes up, all means over seeds) and writes
the PNG of accuracy against cumulative bytes up (mean over seeds per round).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics as st
import subprocess
import sys
from pathlib import Path

SCENARIO = Path(__file__).resolve().parents[1] / "simulations" / "scenarios" / "digits_dirichlet.toml"


def run(item: str, seed: int, rounds: int, runs: Path) -> Path:
    """One run of `item` = SPEC[@WARMUP] (WARMUP: --topk-warmup, e.g. `topk:0.01@off`; default the CLI's)."""
    codec, _, warmup = item.partition("@")
    out = runs / f"{item.replace(':', '_').replace('@', '_w')}_s{seed}"
    if not (out / "metrics.json").is_file():
        extra = ["--topk-warmup", warmup] if warmup else []
        subprocess.run([sys.executable, "-m", "fedort", "simulate", str(SCENARIO), "--rounds", str(rounds), "--seed",
                        str(seed), "--codec", codec, *extra, "--out", str(out), "--no-progress"], check=True,
                       stdout=subprocess.DEVNULL)
    return out


def load(out: Path) -> tuple[list[float], list[int], str]:
    rounds = json.loads((out / "metrics.json").read_text())["rounds"]
    acc = [r["accuracy"] for r in rounds]
    up = list(itertools.accumulate(r["bytes_up"] for r in rounds))
    return acc, up, rounds[0].get("codec", "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--codecs", default="raw,fp16,int8,topk:0.01")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--rounds", type=int, default=45)
    ap.add_argument("--at", type=int, default=30, help="the round of the first accuracy column")
    ap.add_argument("--runs", type=Path, default=Path("runs") / "codec-simulate")
    ap.add_argument("--png", type=Path, default=Path(__file__).with_name("codec_simulate.png"))
    args = ap.parse_args(argv)
    codecs, seeds = args.codecs.split(","), [int(s) for s in args.seeds.split(",")]
    data = {c: [load(run(c, s, args.rounds, args.runs)) for s in seeds] for c in codecs}
    a, n = args.at - 1, args.rounds - 1
    raw_up = st.mean(up[a] for _, up, _ in data[codecs[0]])
    raw_all = st.mean(up[n] for _, up, _ in data[codecs[0]])
    print(f"| codec | bytes up, {args.at} / {args.rounds} rounds | fewer bytes than {codecs[0]}, {args.at} / "
          f"{args.rounds} rounds | acc @{args.at} | last 5 @{args.at} | acc @{args.rounds} | last 5 @{args.rounds} "
          f"| acc − {codecs[0]} per seed @{args.at} | acc − {codecs[0]} per seed @{args.rounds} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    base = data[codecs[0]]
    for c in codecs:
        runs = data[c]
        m = lambda f: 100 * st.mean(f(acc) for acc, _, _ in runs)  # noqa: E731
        up, up_all = st.mean(u[a] for _, u, _ in runs), st.mean(u[n] for _, u, _ in runs)
        diffs = [", ".join(f"{100 * (r[0][i] - b[0][i]):+.2f}" for r, b in zip(runs, base)) for i in (a, n)]
        print(f"| {c} | {up / 1e6:.2f} / {up_all / 1e6:.2f} MB | {raw_up / up:.2f}× / {raw_all / up_all:.2f}× | "
              f"{m(lambda x: x[a]):.2f} | {m(lambda x: st.mean(x[a - 4:a + 1])):.2f} | {m(lambda x: x[n]):.2f} | "
              f"{m(lambda x: st.mean(x[n - 4:n + 1])):.2f} | {diffs[0]} | {diffs[1]} |")

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for c in codecs:
        runs = data[c]
        acc = [100 * st.mean(r[0][i] for r in runs) for i in range(args.rounds)]
        up = [st.mean(r[1][i] for r in runs) / 1e6 for i in range(args.rounds)]
        ax.plot(up, acc, marker=".", label=c)
    ax.set_xscale("log")
    ax.set_xlabel("cumulative bytes up, MB (log scale)")
    ax.set_ylabel("test accuracy, % (mean over seeds)")
    ax.set_ylim(80, 100)
    ax.set_title(f"fedort simulate, digits Dirichlet(0.5), 10 clients, {args.rounds} rounds, seeds {args.seeds}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"plot: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
