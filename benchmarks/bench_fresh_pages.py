"""What touching fresh memory costs on this machine: 20 MB written into new pages vs into pages just freed or reused.

A VM whose guest hands freed memory back to its host (free page reporting; see
/sys/module/page_reporting/parameters where it exists) pays a host fault the next time such a page is
used. Four ways to write a 20 MB file of a round's global vector, `--files` times, `--gap` s apart
(each fsynced, as the coordinator does), and two ways to fill a 20 MB array:

    new         a new file each time (the previous ones stay, cached: the state dir's vector history)
    drop-before a new file, right after dropping the page cache of the one written two steps earlier
    drop-after  a new file, the previous one's page cache dropped right after it (a step earlier)
    recycle     the previous file renamed and overwritten in place (its cached pages reused)
    array-fresh a new anonymous mapping each time, filled
    array-reuse one mapping, filled again

    python benchmarks/bench_fresh_pages.py            # in benchmarks/.work (the state dirs' filesystem)
    python benchmarks/bench_fresh_pages.py --dir /dev/shm/x --files 20
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SIZE = 20_000_140   # bytes of a 5,000,035-value float32 vector


def _drop(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _write(path: Path, data: memoryview, flags: int) -> tuple[float, float, float]:
    """(write ms, its thread CPU ms, fsync ms)."""
    fd = os.open(path, flags, 0o644)
    try:
        t0, c0 = time.perf_counter(), time.thread_time()
        os.pwrite(fd, data, 0)
        t1, c1 = time.perf_counter(), time.thread_time()
        os.fsync(fd)
        return 1000 * (t1 - t0), 1000 * (c1 - c0), 1000 * (time.perf_counter() - t1)
    finally:
        os.close(fd)


def files(folder: Path, mode: str, n: int, gap: float) -> list[tuple[float, float, float]]:
    folder.mkdir(parents=True, exist_ok=True)
    data = memoryview(np.ones(SIZE // 4, np.float32)).cast("B")
    out = []
    for i in range(n):
        path = folder / f"{mode}-{i}.f32"
        if mode == "drop-before" and i >= 2:
            _drop(folder / f"{mode}-{i - 2}.f32")
        if mode == "recycle" and i >= 1:
            os.rename(folder / f"{mode}-{i - 1}.f32", path)
            out.append(_write(path, data, os.O_WRONLY))
        else:
            out.append(_write(path, data, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        if mode == "drop-after":
            _drop(path)
        time.sleep(gap)
    return out


def arrays(mode: str, n: int, gap: float) -> list[tuple[float, float, float]]:
    keep = np.frombuffer(mmap.mmap(-1, SIZE), dtype=np.uint8)
    out = []
    for _ in range(n):
        a = keep if mode == "array-reuse" else np.frombuffer(mmap.mmap(-1, SIZE), dtype=np.uint8)
        t0, c0 = time.perf_counter(), time.thread_time()
        a.fill(1)
        out.append((1000 * (time.perf_counter() - t0), 1000 * (time.thread_time() - c0), 0.0))
        del a
        time.sleep(gap)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=HERE / ".work" / "fresh-pages")
    ap.add_argument("--files", type=int, default=12)
    ap.add_argument("--gap", type=float, default=0.2, help="seconds between writes (a round; default 0.2)")
    args = ap.parse_args()
    print(f"# {SIZE / 1e6:.0f} MB each, {args.files} times, {args.gap:g} s apart, files in {args.dir}; "
          f"load {os.getloadavg()[0]:.1f}")
    for mode in ("new", "drop-before", "drop-after", "recycle", "array-fresh", "array-reuse"):
        folder = args.dir / mode
        try:
            res = arrays(mode, args.files, args.gap) if mode.startswith("array") else \
                files(folder, mode, args.files, args.gap)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        steady = res[2:]   # the first two: before anything was dropped or recycled
        slow = sum(r[1] > 15 for r in steady)
        print(f"{mode:12s} write/fill ms median {statistics.median(r[0] for r in steady):6.1f} "
              f"max {max(r[0] for r in steady):6.1f}; CPU ms median {statistics.median(r[1] for r in steady):5.1f}, "
              f"> 15 ms in {slow}/{len(steady)}" + ("" if mode.startswith("array") else
              f"; fsync ms median {statistics.median(r[2] for r in steady):5.1f}"), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
