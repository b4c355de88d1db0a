"""Physical floors of moving vectors on this machine, side by side in one run, and what they allow.

Issue 12 asks for (a) streamed uploads ≥ 0.9× the raw gRPC floor and (b) a no-work 5 M round ≤
0.33× Flower's, with every acknowledged update durable (fsynced) and integrity-checked. This script
measures, in one process and one run, the per-byte work that promise cannot skip, next to the two
baselines, and prints the best either target could reach if fedort did nothing but that work:

- digests of a 20 MB vector (5 M float32): sha256 (hashlib, OpenSSL: SHA-NI where the CPU has
  it) and, when the `blake3` package is installed, BLAKE3 (one thread);
- page-cache write of a 20 MB file (no fsync); fsync of 10 such files written just before
  (what a round's 10 updates cost the disk); reading a 20 MB vector file back (page cache);
  the same 10 files overwritten in place and fsynced, then unlinked (what recycling update files saves);
- the finiteness check of 5 M float32 and the float64 fold of 10 × 5 M (`WeightedSum`, the
  accumulator the coordinator uses);
- the raw gRPC upload floor: `bench_transfer.py`'s drain-only server (the coordinator's own
  server options) receiving `--upload-mb` of float32 in 256 KiB chunks from a client in this
  process; wall time and the CPU of both ends;
- Flower 1.42's no-work round at 5 M values (`bench_round_overhead.py`'s Flower trial), and
  optionally fedort's own (`--fedort`), in the same run.

The bounds assume both cores are free for the run (optimistic on a shared machine):

    upload bound  = raw wall / max(raw wall, server CPU + per-byte work)           (one thread)
                  = raw wall / max(raw wall, (raw CPU + per-byte work) / cores)   (pipelined)
    round bound   = max(CPU floor / cores, fsyncs) / Flower's round

with the round's CPU floor = 10 × (device: write + digest; coordinator: digest + finite check)
+ the fold + the new global vector (mean, write, sha256) + the round's model export (a write), and
its disk floor = 12 fsyncs of 20 MB (10 updates, the global vector, the model). The upload bound is
given twice: with the per-byte work on the receiving thread, and spread over idle cores. Each micro-measurement is the median of
`--trials` trials of `--reps` repetitions (the best repetition of each trial).

    python benchmarks/bench_byte_floors.py                     # 5 trials, Flower 2 trials, ~2 min
    python benchmarks/bench_byte_floors.py --fedort --json benchmarks/.work/floors.json
    python benchmarks/bench_byte_floors.py --no-flower --no-grpc   # the micro floors only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

P = 5_000_000          # values per vector (the 5 M round)
NBYTES = 4 * P


def _best(f, reps: int) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return min(out)


def micro_trial(work: Path, reps: int) -> dict[str, float]:
    """One trial of every micro floor, seconds (best of `reps` each)."""
    from fedort.coordinator.aggregation.weighted_sum import WeightedSum

    rng = np.random.default_rng(0)
    vec = rng.standard_normal(P).astype(np.float32)
    buf = memoryview(vec).cast("B")
    out: dict[str, float] = {}
    out["sha256_20MB"] = _best(lambda: hashlib.sha256(buf).digest(), reps)
    try:
        import blake3
        out["blake3_20MB"] = _best(lambda: blake3.blake3(buf).digest(), reps)
    except ImportError:
        pass
    out["finite_5M"] = _best(lambda: bool(np.isfinite(vec).all()), reps)

    paths = [work / f"v{i}.f32" for i in range(10)]

    def write(path: Path) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
        try:
            view = buf
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def write_fresh() -> None:
        paths[0].unlink(missing_ok=True)
        write(paths[0])
    out["write_20MB"] = _best(write_fresh, reps)
    os.sync()

    def fsync10() -> float:
        for p in paths:
            p.unlink(missing_ok=True)
            write(p)
        t0 = time.perf_counter()
        for p in paths:
            fd = os.open(p, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        return time.perf_counter() - t0
    out["fsync_10x20MB"] = min(fsync10() for _ in range(max(1, reps // 2)))
    out["read_20MB"] = _best(lambda: np.fromfile(paths[0], dtype="<f4"), reps)

    def overwrite10() -> tuple[float, float, float]:
        """Rewrite the 10 (synced) files in place, fsync them, then unlink them: seconds per file / for all."""
        t0 = time.perf_counter()
        fds = []
        for p in paths:
            fd = os.open(p, os.O_WRONLY)
            done = 0
            while done < len(buf):
                done += os.pwrite(fd, buf[done:], done)
            fds.append(fd)
        t1 = time.perf_counter()
        for fd in fds:
            os.fsync(fd)
            os.close(fd)
        t2 = time.perf_counter()
        for p in paths:
            p.unlink()
        t3 = time.perf_counter()
        for p in paths:
            write(p)
        os.sync()
        return (t1 - t0) / 10, t2 - t1, (t3 - t2) / 10
    runs = [overwrite10() for _ in range(max(1, reps // 2))]
    out["overwrite_20MB"] = min(r[0] for r in runs)             # page-cache write into an existing file's pages
    out["fsync_overwrite_10x20MB"] = min(r[1] for r in runs)
    out["unlink_20MB"] = min(r[2] for r in runs)                # freeing a cached 20 MB file

    acc = WeightedSum(P, np.dtype(np.float64))
    vectors = [vec + i for i in range(10)]

    def fold() -> None:
        acc.reset()
        for v in vectors:
            acc.add(v, 1.0)
    out["fold_f64_10x5M"] = _best(fold, reps)
    out["mean_5M"] = _best(lambda: acc.mean(), reps)
    for p in paths:
        p.unlink(missing_ok=True)
    return out


# ---- raw gRPC upload floor ------------------------------------------------------------------

def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def grpc_floor(mb: float, reps: int, chunk: int = 256 << 10) -> list[dict[str, float]]:
    """Uploads of `mb` MB to bench_transfer's drain-only server: wall and CPU of client and server per upload."""
    import grpc

    import bench_transfer as bt
    from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc

    vector = np.ones(int(mb * 1e6 / 4), np.float32)
    sha = hashlib.sha256(memoryview(vector).cast("B")).digest()
    with tempfile.TemporaryDirectory(prefix="fedort-floor-") as tmp:
        port_file = Path(tmp) / "port"
        cmd = [sys.executable, str(HERE / "bench_transfer.py"), "--raw-server", str(port_file), "--mb", str(mb)]
        proc, port = bt.start(cmd, port_file, Path(tmp) / "raw.log")
        rows = []
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}", options=bt.CHANNEL_OPTIONS) as channel:
                stub = pb_grpc.CoordinatorStub(channel)
                bt.upload(stub, "bench", "raw", 1, vector[:1024], sha, chunk, b"x" * 32)   # warm the channel
                for _ in range(reps):
                    s0, c0, t0 = _proc_cpu(proc.pid), time.process_time(), time.perf_counter()
                    bt.upload(stub, "bench", "raw", 1, vector, sha, chunk, b"x" * 32)
                    wall = time.perf_counter() - t0
                    rows.append({"wall": wall, "client_cpu": time.process_time() - c0,
                                 "server_cpu": _proc_cpu(proc.pid) - s0})
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    return rows


# ---- driver ---------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5, help="micro-floor trials (default 5)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions per micro floor in a trial (best kept)")
    ap.add_argument("--upload-mb", type=float, default=100.0, help="raw gRPC upload size (default 100 MB)")
    ap.add_argument("--upload-reps", type=int, default=5)
    ap.add_argument("--flower-trials", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6, help="rounds per Flower / fedort 5 M trial")
    ap.add_argument("--fedort", action="store_true", help="also fedort's 5 M no-work round (files path), same run")
    ap.add_argument("--no-flower", action="store_true")
    ap.add_argument("--no-grpc", action="store_true")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    loads = [os.getloadavg()[0]]
    print(f"# {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    work = HERE / ".work" / "floors"
    work.mkdir(parents=True, exist_ok=True)
    result: dict = {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "micro": [], "grpc": [],
                    "flower": [], "fedort": []}

    def interleaved_micro() -> None:
        result["micro"].append(micro_trial(work, args.reps))
        loads.append(os.getloadavg()[0])

    # interleave everything so a load change hits all of it
    for i in range(args.trials):
        interleaved_micro()
        if not args.no_grpc and i < 2:
            result["grpc"] += grpc_floor(args.upload_mb, max(1, args.upload_reps // 2 + i % 2))
            loads.append(os.getloadavg()[0])
        if not args.no_flower and i < args.flower_trials:
            import bench_round_overhead as overhead
            import flower_venv
            overhead.WORK.mkdir(parents=True, exist_ok=True)
            py = flower_venv.ensure(extra=("flwr[simulation]",), probe="import flwr, ray")
            res = overhead.flower_trial(py, overhead.hidden_for(P) * 75 + 10, args.rounds, 10, 1)
            result["flower"].append(overhead.per_round(res["starts"]))
            loads.append(os.getloadavg()[0])
        if args.fedort and i < args.flower_trials:
            import bench_round_overhead as overhead
            res = overhead.run_fedort(P, args.rounds, 10, 2)
            result["fedort"].append({"per_round": overhead.per_round(res["starts"]),
                                     "cpu_per_round": (res["coordinator_cpu_s"] + res["worker_cpu_s"]) / args.rounds})
            loads.append(os.getloadavg()[0])
    result["load"] = [min(loads), max(loads)]

    med = {k: statistics.median(t[k] for t in result["micro"]) for k in result["micro"][0]}
    rng = {k: (min(t[k] for t in result["micro"]), max(t[k] for t in result["micro"])) for k in med}
    result["median"] = med
    print("\n| floor (20 MB = one 5 M float32 vector) | median | range over trials | throughput |")
    print("| --- | --- | --- | --- |")
    for k, v in med.items():
        mb = {"fold_f64_10x5M": 10 * NBYTES, "fsync_10x20MB": 10 * NBYTES, "fsync_overwrite_10x20MB": 10 * NBYTES,
              "mean_5M": 8 * P}.get(k, NBYTES)
        print(f"| {k} | {1000 * v:.1f} ms | {1000 * rng[k][0]:.1f}–{1000 * rng[k][1]:.1f} ms | {mb / v / 1e9:.2f} GB/s |")

    digests = ["sha256"] + (["blake3"] if "blake3_20MB" in med else [])
    if result["grpc"]:
        g = result["grpc"]
        wall = statistics.median(r["wall"] for r in g)
        cpu = statistics.median(r["client_cpu"] + r["server_cpu"] for r in g)
        scpu = statistics.median(r["server_cpu"] for r in g)
        scale = args.upload_mb * 1e6 / NBYTES
        rates = ", ".join(f"{args.upload_mb / r['wall']:.0f}" for r in g)
        print(f"\nraw gRPC upload floor, {args.upload_mb:.0f} MB in 256 KiB chunks, {len(g)} uploads: "
              f"{args.upload_mb / wall:.0f} MB/s (median; {rates}), "
              f"CPU client + server {1000 * cpu:.0f} ms (server {1000 * scpu:.0f} ms) per upload")
        result["upload_bound"] = {}
        for d in digests:
            extra = scale * (med[f"{d}_20MB"] + med["write_20MB"] + med["finite_5M"])
            serial = wall / max(wall, scpu + extra)                  # per-byte work on the receiving thread
            piped = wall / max(wall, (cpu + extra) / args.cores)     # per-byte work on whichever core is free
            result["upload_bound"][d] = {"one_thread": serial, "pipelined": piped}
            print(f"  server per-byte work with {d} (digest + page-cache write + finite check): {1000 * extra:.0f} ms "
                  f"per upload -> best possible fedort/raw {serial:.2f} on the receiving thread, {piped:.2f} pipelined "
                  f"over {args.cores} idle cores (target ≥ 0.90)")
    if result["flower"]:
        fl = statistics.median(result["flower"])
        trials = ", ".join(f"{1000 * x:.0f}" for x in result["flower"])
        print(f"\nFlower 5 M no-work round: {1000 * fl:.0f} ms (median; {trials}); "
              f"target 0.33 × = {330 * fl:.0f} ms")
        if result["fedort"]:
            fe = statistics.median(r["per_round"] for r in result["fedort"])
            cpus = ", ".join(f"{1000 * r['cpu_per_round']:.0f}" for r in result["fedort"])
            print(f"fedort 5 M no-work round (files path): {1000 * fe:.0f} ms = {fe / fl:.2f} × Flower; CPU per round "
                  f"{cpus} ms (coordinator + workers, start-up included; bench_round_cpu.py subtracts it)")
        result["round_bound"] = {}
        for d in digests:
            device = 10 * (med["write_20MB"] + med[f"{d}_20MB"])
            coord = 10 * (med[f"{d}_20MB"] + med["finite_5M"]) + med["fold_f64_10x5M"] + med["mean_5M"]
            glob = 2 * med["write_20MB"] + med["sha256_20MB"]       # the new global vector + the round's model export
            cpu = device + coord + glob
            disk = 1.2 * med["fsync_10x20MB"]                         # 10 new update files + global vector + model
            recycled = med.get("fsync_overwrite_10x20MB", med["fsync_10x20MB"]) + 0.2 * med["fsync_10x20MB"]
            wall = max(cpu / args.cores, disk)
            wall_r = max(cpu / args.cores, recycled)                  # update files overwritten in place
            result["round_bound"][d] = {"cpu_s": cpu, "wall_s": wall, "ratio": wall / fl, "wall_recycled_s": wall_r,
                                        "ratio_recycled": wall_r / fl}
            print(f"  round floor with {d} update digests: CPU {1000 * cpu:.0f} ms (devices {1000 * device:.0f}, "
                  f"coordinator {1000 * coord:.0f}, global + export {1000 * glob:.0f}), fsyncs {1000 * disk:.0f} ms new "
                  f"/ {1000 * recycled:.0f} ms recycled -> wall ≥ {1000 * wall:.0f} / {1000 * wall_r:.0f} ms = "
                  f"{wall / fl:.2f} / {wall_r / fl:.2f} × Flower (target ≤ 0.33)")
    print(f"\n# load average over the run {result['load'][0]:.1f}–{result['load'][1]:.1f}, ended "
          f"{time.strftime('%H:%M:%S', time.gmtime())} UTC")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
