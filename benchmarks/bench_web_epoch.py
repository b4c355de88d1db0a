"""A browser device's time per local epoch against a Python device's, same artifacts, data and settings.

The Python side is the device's own `local_round.fit` (one epoch, fresh optimizer state, from the same global
vector); the TypeScript side is edge_client/web's `LocalTrainer.fit` on onnxruntime-web 1.19.2 (single-threaded
WASM with SIMD), under Node and in headless Chromium (edge_client/web/scripts/bench-epoch.mjs). The sides take
turns in `--blocks` blocks of `--repeats` timed fits (each block after one warm-up), so load that comes and goes
hits all of them; the figures are medians over all blocks and their ratios to Python's. At a learning rate other
than the artifacts' own (0.001) the web client takes each step as a rescaled optimizer step
(edge_client/web/src/local-trainer.ts), which costs a parameter read and write per step: both rates are measured.

    python benchmarks/bench_web_epoch.py                  # digits (1797 rows), mlp, batch 32, 3 blocks of 7
    python benchmarks/bench_web_epoch.py --blocks 5 --repeats 10 --batch 64

Needs `npm ci && npm run build` in edge_client/web, and /usr/bin/chromium for the browser column.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedort.edge_client.training import local_round# noqa: E402
from fedort.ort.artifacts import Manifest, build_artifacts# noqa: E402
from fedort.common.client_data import ClientData# noqa: E402
from fedort.ort.models import builtin_model# noqa: E402
from fedort.ort.session import TrainingSession# noqa: E402
from fedort.protos.messages import TrainConfig  # noqa: E402

WEB = Path(__file__).resolve().parents[1] / "edge_client" / "web"


def python_epochs(artifacts: Path, data: Path, repeats: int, batch: int, lr: float) -> list[float]:
    session = TrainingSession.from_artifacts(artifacts)
    manifest = Manifest.from_json((artifacts / "manifest.json").read_text())
    client = ClientData.load(data)
    start = session.to_buffer()
    cfg = TrainConfig(local_epochs=1, batch_size=batch, learning_rate=lr, seed=0, reset_optimizer=True)
    local_round.fit(session, start, client, manifest.inputs, cfg)   # warm-up
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        local_round.fit(session, start, client, manifest.inputs, cfg)
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    from sklearn.datasets import load_digits

    with tempfile.TemporaryDirectory(prefix="fedort-bench-web-") as tmp:
        tmp = Path(tmp)
        build_artifacts(builtin_model("mlp"), tmp / "mlp")
        d = load_digits()
        np.savez(tmp / "digits.npz", x=(d.data / 16).astype(np.float32), labels=d.target.astype(np.int64))
        print(f"mlp, digits ({len(d.target)} rows), batch {args.batch}, {args.blocks} blocks of {args.repeats}; "
              "median s/epoch")
        print(f"{'lr':>7} {'python':>9} {'node':>9} {'chromium':>9} {'node/py':>8} {'chrome/py':>9}")
        for lr in (0.001, 0.01):
            times: dict[str, list[float]] = {"python": [], "node": [], "chromium": []}
            for _ in range(args.blocks):
                times["python"] += python_epochs(tmp / "mlp", tmp / "digits.npz", args.repeats, args.batch, lr)
                done = subprocess.run(["node", str(WEB / "scripts" / "bench-epoch.mjs"), str(tmp / "mlp"),
                                       str(tmp / "digits.npz"), str(args.repeats), str(args.batch), repr(lr)],
                                      capture_output=True, text=True, check=True, cwd=WEB, timeout=600)
                web = json.loads(done.stdout)
                times["node"] += web["node"]
                times["chromium"] += web["chromium"] or []
            py, node = statistics.median(times["python"]), statistics.median(times["node"])
            chrome = statistics.median(times["chromium"]) if times["chromium"] else float("nan")
            print(f"{lr:>7} {py:>9.4f} {node:>9.4f} {chrome:>9.4f} {node / py:>7.2f}x {chrome / py:>8.2f}x")


if __name__ == "__main__":
    main()
