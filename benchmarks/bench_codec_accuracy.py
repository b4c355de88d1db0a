"""Update codecs on the README's learning task: final accuracy against bytes uploaded, per codec.

The task of simulations/scenarios/digits_dirichlet.toml (digits, built-in MLP, 10 clients,
Dirichlet(0.5), E = 2, B = 16, lr 0.02, every client every round), run as an IN-PROCESS FedAvg
loop — not through the coordinator, which does not decode codecs yet. Each round every client
trains from the global vector with the same ORT session code as a device (`local_round.fit`),
encodes its update exactly as `EdgeClient` does (`UpdateEncoder`: delta from the global, top-k
error feedback, stochastic rounding seeded per client and round), and the payload is decoded as
the coordinator would (`VectorDecoder` over 1 MiB chunks, pieces folded into a float64
accumulator, weights = examples, the global added back once for delta updates). Test accuracy
of the new global after every round. Bytes up = payload bytes (the vector part of the stream).

    python benchmarks/bench_codec_accuracy.py                  # 5 codecs x 45 rounds x 2 seeds, ~4 min
    python benchmarks/bench_codec_accuracy.py --rounds 5 --seeds 1 --codecs raw,int8   # smoke
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def client_seed(seed: int, round: int, client: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}|{round}|{client}".encode()).digest()[:4], "little")


def run(codec: str, rounds: int, seed: int, artifacts: Path) -> list[dict]:
    from fedort.common.client_data import ClientData
    from fedort.edge_client.training.local_round import evaluate, fit
    from fedort.ort.session import TrainingSession
    from fedort.edge_client.uploads.update_codec import UpdateEncoder
    from fedort.protos.vector_stream import vector_digest
    from fedort.protos.update_codecs import VectorDecoder, describe_payload, iter_payload_chunks, parse_codec
    from fedort.protos.messages import TrainConfig
    from fedort.simulations.data.datasets import subset
    from fedort.simulations.population import digits_population

    pop = digits_population(10, "dirichlet:0.5", seed)
    from fedort.simulations.data.datasets import load_digits_split
    train, _ = load_digits_split(0.2, seed)
    data = [ClientData.from_arrays(subset(train, vc.indices)) for vc in pop.clients]
    test = ClientData.from_arrays(pop.test)
    session = TrainingSession.from_artifacts(artifacts)
    inputs = session.manifest.inputs
    g = np.array(session.to_buffer(), dtype=np.float32, copy=True)
    encoders = [UpdateEncoder(parse_codec(codec)) for _ in data]
    rows, total_bytes = [], 0
    for r in range(1, rounds + 1):
        g_sha = vector_digest(g)
        acc = np.zeros(len(g), dtype=np.float64)
        w_all = w_delta = 0.0
        for i, d in enumerate(data):
            cfg = TrainConfig(local_epochs=2, batch_size=16, learning_rate=0.02, seed=client_seed(seed, r, i))
            res = fit(session, g, d, inputs, cfg)
            u = encoders[i].encode(g, g_sha, res.vector, seed=cfg.seed)
            header, body = u.stream("c", "m", r, res.num_examples, {}, 1 << 20)
            payload = body if isinstance(body, bytes) else body.tobytes()
            dec = VectorDecoder(header.vector, expected_length=len(g), base_sha256=g_sha)
            w = float(res.num_examples)
            for chunk in iter_payload_chunks(payload, 1 << 20):
                for piece in dec.feed(chunk):
                    piece.add_to(acc, w)
            for piece in dec.finish():
                piece.add_to(acc, w)
            w_all += w
            w_delta += w if dec.delta else 0.0
            encoders[i].settle(u, counted=True)
            total_bytes += len(payload)
        g = ((acc + w_delta * g.astype(np.float64)) / w_all).astype(np.float32)
        m = evaluate(session, g, test, inputs, TrainConfig(batch_size=256)).metrics
        rows.append({"codec": codec, "seed": seed, "round": r, "accuracy": m["val_accuracy"].value,
                     "bytes_up": total_bytes})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--codecs", default="raw,fp16,int8,topk:0.01,zstd+topk:0.01")
    ap.add_argument("--rounds", type=int, default=45)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=HERE / ".work" / "codec_accuracy")
    args = ap.parse_args()
    from fedort.ort.artifacts import build_artifacts
    from fedort.ort.models import mlp

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        build_artifacts(mlp(), Path(tmp))
        rows = []
        for codec in args.codecs.split(","):
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                t0 = time.perf_counter()
                rs = run(codec, args.rounds, seed, Path(tmp))
                rows += rs
                at = {n: rs[min(n, len(rs)) - 1]["accuracy"] for n in (30, 45)}
                print(f"{codec:>15} seed {seed}: acc@30 {at[30]:.4f}  acc@45 {at[45]:.4f}  "
                      f"bytes up {rs[-1]['bytes_up'] / 1e6:.2f} MB  ({time.perf_counter() - t0:.0f} s)", flush=True)
    (args.out / "rows.json").write_text(json.dumps({"load": os.getloadavg(), "rows": rows}, indent=1))
    plot(rows, args.out / "codec_accuracy.png")
    return 0


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for codec in dict.fromkeys(r["codec"] for r in rows):
        seeds = sorted({r["seed"] for r in rows if r["codec"] == codec})
        per = [[r for r in rows if r["codec"] == codec and r["seed"] == s] for s in seeds]
        acc = np.mean([[r["accuracy"] for r in p] for p in per], axis=0)
        mb = np.mean([[r["bytes_up"] for r in p] for p in per], axis=0) / 1e6
        ax.plot(mb, acc * 100, label=codec)
    ax.set_xscale("log")
    ax.set_xlabel("cumulative bytes up, all clients (MB, log scale)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(50, 100)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("digits, 10 clients, Dirichlet(0.5), E=2, B=16 (mean of seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())
