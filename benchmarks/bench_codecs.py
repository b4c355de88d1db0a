"""Update codecs: encode and decode throughput per codec, and the compression ratio vs raw float32.

For P = 1 M and 5 M values of a delta-like vector (Gaussian, sigma 0.01, as `trained - global`
looks after a round of SGD) it times, per codec (protos/codecs):

- encode: `codec.encode(delta, rng)` -> payload bytes (the device's work);
- decode: the coordinator's streaming path — the payload fed in 1 MiB chunks to the codec's
  StreamDecoder and every piece folded into a float64 accumulator, `piece.add_to(acc, 1.0)`.

Throughput is MB of raw float32 values per second (P * 4 bytes / time, the same numerator for
every codec, so ratios are time ratios); best of `--repeats`. Ratio = 4P / payload bytes.
No network, one process, one thread (numpy may use more for a few ops).

    python benchmarks/bench_codecs.py             # 1 M and 5 M values, ~1 minute on 2 cores
    python benchmarks/bench_codecs.py --quick     # 200 k values
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

from fedort.protos.update_codecs import get_codec, iter_payload_chunks

SPECS = ["raw", "fp16", "bf16", "int8", "int8:1024", "topk:0.01", "topk:0.001",
         "zstd+raw", "zstd+fp16", "zstd+int8", "zstd+topk:0.01"]
CHUNK = 1 << 20


def best_of(repeats: int, fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def fold(spec: str, payload: bytes, acc: np.ndarray) -> None:
    dec = get_codec(spec).decoder(len(acc), len(payload))
    for chunk in iter_payload_chunks(payload, CHUNK):
        for piece in dec.feed(chunk):
            piece.add_to(acc, 1.0)
    for piece in dec.finish():
        piece.add_to(acc, 1.0)


def run(sizes: list[int], repeats: int) -> list[dict]:
    rows = []
    for n in sizes:
        delta = (np.random.default_rng(0).standard_normal(n) * 0.01).astype(np.float32)
        acc = np.zeros(n, dtype=np.float64)
        for spec in SPECS:
            codec = get_codec(spec)
            t_enc, payload = best_of(repeats, lambda: codec.encode(delta, np.random.default_rng(1)))
            t_dec, _ = best_of(repeats, lambda: fold(spec, payload, acc))
            mb = 4 * n / 1e6
            rows.append({"values": n, "codec": spec, "payload_bytes": len(payload),
                         "ratio": round(4 * n / len(payload), 2),
                         "encode_MBps": round(mb / t_enc), "decode_fold_MBps": round(mb / t_dec)})
            print(f"{n:>9,} {spec:>15}  ratio {4 * n / len(payload):7.2f}x  encode {mb / t_enc:7.0f} MB/s  "
                  f"decode+fold {mb / t_dec:7.0f} MB/s", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200 k values only")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args()
    sizes = [200_000] if args.quick else [1_000_000, 5_000_000]
    print(f"# {platform.processor() or platform.machine()}, numpy {np.__version__}")
    rows = run(sizes, args.repeats)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
