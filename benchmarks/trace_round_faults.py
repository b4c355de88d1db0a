"""Where a 5 M no-work round touches fresh memory: page faults per process and the cost of each 20 MB step.

Runs `bench_round_overhead.fedort_trial` (the coordinator in this process, 2 spawned workers) with
timers around the steps that write or allocate a whole vector, each recording its wall time, its
thread's CPU time and its thread's minor page faults (`RUSAGE_THREAD`); a sampler reads every process's
minor faults and CPU ticks (/proc/PID/stat) every 20 ms. Per steady round (round 2 on, the interval
between two TRAINING transitions) it reports the medians, and how many rounds hit a step's slow mode.

Why: on a VM that hands freed guest memory back to its host (free page reporting), the first touch
of such a page costs a host fault, so a fresh 20 MB array or a new 20 MB file's page cache costs
many times a write into mapped memory. Page-cache pages a write allocates
are no minor faults: the step's thread CPU shows them instead.

    python benchmarks/trace_round_faults.py --trials 3
    python benchmarks/ab_base.py --base REV --runs 3 --grep "trace " -- $PWD/benchmarks/trace_round_faults.py
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
_calls: list[tuple[str, float, float, float, int]] = []   # (label, start unix s, wall s, thread CPU s, minflt)
_lock = threading.Lock()

# (module, attribute, label): the coordinator's and the workers' whole-vector steps
COORDINATOR = [("fedort.coordinator.engine.round_engine", "atomic_write", "global write"),
               ("fedort.coordinator.aggregation.weighted_sum", "WeightedSum.mean", "mean"),
               ("fedort.coordinator.colocated.local_vectors", "LocalVectorDir.take", "take"),
               ("fedort.coordinator.export.inference", "Exporter.export", "export")]
WORKER = [("fedort.edge_client.uploads.local_vectors", "LocalVectors.read_global", "read global"),
          ("fedort.ort.session", "TrainingSession.to_buffer", "to_buffer"),
          ("fedort.ort.session", "TrainingSession.from_buffer", "from_buffer"),
          ("fedort.edge_client.uploads.local_vectors", "_write_durably", "write update")]


def _timed(fn, label):
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        f0, c0, t0, p0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt, time.thread_time(), time.time(), \
            time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            wall, cpu = time.perf_counter() - p0, time.thread_time() - c0
            faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0
            with _lock:
                _calls.append((label, t0, wall, cpu, faults))
    return timed


def _patch(targets) -> None:
    import importlib

    for module, attr, label in targets:
        owner = importlib.import_module(module)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        if hasattr(owner, name):
            setattr(owner, name, _timed(getattr(owner, name), label))


def traced_worker(plan) -> dict:
    """`bench_round_overhead._noop_worker` with the worker steps timed; returns its calls too."""
    import bench_round_overhead as b

    _patch(WORKER)
    stats = b._noop_worker(plan)
    return {**stats, "calls": list(_calls)}


def _proc_stat(pid: str) -> tuple[int, int] | None:
    try:
        text = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[7]), int(fields[11]) + int(fields[12])   # minflt, utime + stime (clock ticks)


def _children() -> list[str]:
    kids = []
    for tid in os.listdir("/proc/self/task"):
        try:
            kids += open(f"/proc/self/task/{tid}/children").read().split()
        except OSError:
            pass
    return kids


class Sampler(threading.Thread):
    """Every 20 ms: (time, {pid: (minflt, ticks)}) for this process and its children."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="fault-sampler")
        self.samples: list[tuple[float, dict[str, tuple[int, int]]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        me = str(os.getpid())
        while not self.stop.is_set():
            stats = {p: s for p in [me, *_children()] if (s := _proc_stat(p)) is not None}
            self.samples.append((time.time(), stats))
            self.stop.wait(0.02)


def trial(params: int, rounds: int) -> dict[str, list[float]]:
    """One traced trial; per steady round: process faults and CPU, and each step's summed wall/CPU/faults."""
    import bench_round_overhead as b

    sampler = Sampler()
    sampler.start()
    original, b._noop_worker = b._noop_worker, traced_worker
    returned: list[dict] = []
    try:
        result = _run(b, params, rounds, returned)
    finally:
        b._noop_worker = original
        sampler.stop.set()
        sampler.join()
    calls = list(_calls) + [c for w in returned for c in w["calls"]]
    _calls.clear()
    return _per_round(result["starts"], sampler.samples, calls, str(os.getpid()))


def _run(b, params: int, rounds: int, returned: list[dict]) -> dict:
    """fedort_trial, keeping what the traced workers return (their calls) beside the usual result."""
    import multiprocessing.pool

    apply_async = multiprocessing.pool.Pool.apply_async

    def keep(self, func, args=(), *rest, **kw):
        job = apply_async(self, func, args, *rest, **kw)
        get = job.get

        def get_and_keep(timeout=None):
            value = get(timeout)
            returned.append(value)
            return {k: v for k, v in value.items() if k != "calls"}
        job.get = get_and_keep
        return job

    multiprocessing.pool.Pool.apply_async = keep
    try:
        return b.fedort_trial(params, rounds, 10, 2)
    finally:
        multiprocessing.pool.Pool.apply_async = apply_async


def _per_round(starts, samples, calls, me: str) -> dict[str, list[float]]:
    def at(t):
        return min(samples, key=lambda s: abs(s[0] - t))[1]

    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    out: dict[str, list[float]] = {}
    for a, z in zip(starts[1:], starts[2:]):
        s0, s1 = at(a), at(z)
        out.setdefault("round ms", []).append(1000 * (z - a))
        workers = [p for p in s1 if p != me and p in s0]
        out.setdefault("coordinator faults", []).append(s1[me][0] - s0[me][0])
        out.setdefault("coordinator CPU ms", []).append(tick_ms * (s1[me][1] - s0[me][1]))
        out.setdefault("workers faults", []).append(sum(s1[p][0] - s0[p][0] for p in workers))
        out.setdefault("workers CPU ms", []).append(tick_ms * sum(s1[p][1] - s0[p][1] for p in workers))
        for label in {c[0] for c in calls}:
            mine = [c for c in calls if c[0] == label and a <= c[1] < z]
            out.setdefault(f"{label} wall ms", []).append(1000 * sum(c[2] for c in mine))
            out.setdefault(f"{label} CPU ms", []).append(1000 * sum(c[3] for c in mine))
            out.setdefault(f"{label} faults", []).append(sum(c[4] for c in mine))
    return out


SLOW_MS = {"global write CPU ms": 15.0, "mean CPU ms": 10.0}   # CPU above this: the step's fresh-memory mode


def summary(rows: dict[str, list[float]]) -> str:
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    slow = ", ".join(f"{k.split(' CPU')[0]} slow in {sum(x > lim for x in rows[k])}/{len(rows[k])}"
                     for k, lim in SLOW_MS.items() if k in rows)
    return (f"per round {med['round ms']:.1f} ms; faults/round coordinator {med['coordinator faults']:.0f}, "
            f"workers {med['workers faults']:.0f}; CPU/round coordinator {med['coordinator CPU ms']:.0f} ms, "
            f"workers {med['workers CPU ms']:.0f} ms; global write CPU {med.get('global write CPU ms', 0):.1f} "
            f"(max {max(rows.get('global write CPU ms', [0])):.1f}) ms; mean CPU {med.get('mean CPU ms', 0):.1f} "
            f"(max {max(rows.get('mean CPU ms', [0])):.1f}) ms, faults {med.get('mean faults', 0):.0f} "
            f"(max {max(rows.get('mean faults', [0])):.0f}); {slow}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--params", type=int, default=5_000_035)
    ap.add_argument("--json", type=Path, help="also append every steady round's figures to this file (JSON lines)")
    args = ap.parse_args()
    _patch(COORDINATOR)
    every: dict[str, list[float]] = {}
    for _ in range(args.trials):
        rows = trial(args.params, args.rounds)
        print(f"trace P={args.params:,} rounds={args.rounds}: {summary(rows)}", flush=True)
        for k, v in rows.items():
            every.setdefault(k, []).extend(v)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(rows) + "\n")
    print(f"\n| per steady round ({len(every['round ms'])} rounds) | median | max |\n| --- | --- | --- |")
    for k in sorted(every):
        print(f"| {k} | {statistics.median(every[k]):.1f} | {max(every[k]):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
