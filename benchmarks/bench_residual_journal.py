"""What a device pays on disk per top-k upload for durable error feedback: encode + settle with its residual
store in a folder (before the journal: one atomic residual write at settle; with it: the journal before the
upload, the answer after). Wall time per upload, median and min over `--uploads`; base API only, so
`ab_base.py` can run it on a revision from before the journal (give it this file's absolute path):

    python benchmarks/ab_base.py --base 52c6a59 --runs 3 --grep median -- \\
        "$PWD/benchmarks/bench_residual_journal.py" --size 5000000 --uploads 9
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from fedort.edge_client.uploads.update_codec import ResidualStore, UpdateEncoder
from fedort.protos.update_codecs import parse_codec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=5_000_000, help="P, values in the vector")
    ap.add_argument("--uploads", type=int, default=9)
    ap.add_argument("--codec", default="topk:0.01")
    ap.add_argument("--dir", default=None, help="folder for the residuals (default: a temp folder)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    g = rng.standard_normal(args.size).astype(np.float32)
    times = []
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        for i in range(args.uploads):
            trained = g + (rng.standard_normal(args.size) * 0.01).astype(np.float32)
            enc = UpdateEncoder(parse_codec(args.codec), store=ResidualStore(folder), key="device|model")
            t = time.perf_counter()
            enc.settle(enc.encode(g, b"", trained, round=i + 1), counted=True)   # a new process per upload
            times.append(time.perf_counter() - t)
    print(f"durable {args.codec} encode+settle, P = {args.size:,}: median {1000 * np.median(times):.1f} ms, "
          f"min {1000 * min(times):.1f} ms over {args.uploads} uploads")


if __name__ == "__main__":
    main()
