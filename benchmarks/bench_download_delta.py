"""How much a lossless download delta would save: consecutive global vectors of a finished run, XOR-ed.

    python benchmarks/bench_download_delta.py RUN/state [--level 3]

For each round r: the float32 bits of g_{r+1} XOR g_r (what a device that cached g_r would need),
byte-planes shuffled (the 4th bytes of every value together, ...) and zstd-compressed, against
raw (4P bytes) and plain zstd of g_{r+1}. Not wired into DownloadVector (see benchmarks/README.md
"Codecs"); this measures the candidate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import zstandard


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("state", type=Path)
    ap.add_argument("--level", type=int, default=3)
    args = ap.parse_args(argv)
    files = sorted((args.state / "vectors").glob("round-*.f32"))
    z = zstandard.ZstdCompressor(level=args.level)
    ratios, plain = [], []
    for a, b in zip(files, files[1:]):
        old, new = np.fromfile(a, dtype="<u4"), np.fromfile(b, dtype="<u4")
        planes = (old ^ new).view(np.uint8).reshape(-1, 4).T.copy()
        ratios.append(new.nbytes / len(z.compress(planes.tobytes())))
        plain.append(new.nbytes / len(z.compress(new.tobytes())))
    q = np.quantile(ratios, [0, 0.5, 1])
    print(f"{len(ratios)} round transitions, {files[0].stat().st_size} bytes each: XOR+shuffle+zstd saves "
          f"{q[0]:.2f}x / {q[1]:.2f}x / {q[2]:.2f}x (min / median / max); plain zstd {np.median(plain):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
