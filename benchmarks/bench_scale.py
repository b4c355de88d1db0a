"""Scale: 1,000 registered virtual clients, 100 per round, on one machine — wall time and peak memory.

Runs `fedort simulate simulations/scenarios/digits_scale.toml` (1,000 clients, 100 per round,
iid digits, MLP, 5 rounds, local backend) as a subprocess, and beside it, in the same run, the
same scenario with only 100 registered clients (`--clients 100`, all 100 selected each round), so
that the memory difference per extra *registered* client can be read off (both train 100
clients a round). The runs alternate (100, 1,000, then again with --pairs 2 ...).

While a run goes, the whole process tree (the simulation's main process with the coordinator
thread, its spawned worker processes, multiprocessing's helpers) is sampled every 0.1 s from
/proc: RSS and PSS (smaps_rollup: shared pages split between processes, so the sum does not
count shared libraries twice) summed over the tree, and each process's own peak RSS (VmHWM,
read until it exits). Wall time is the subprocess's; per-round times come from the run's
coordinator state (round open -> next round open, and open -> commit as in metrics.csv).
No psutil needed.

    python benchmarks/bench_scale.py                      # 100 vs 1,000 registered, 1 pair, ~2-3 min
    python benchmarks/bench_scale.py --pairs 2 --rounds 5
    python benchmarks/bench_scale.py --registered 1000    # the 1,000-client run only
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / ".work" / "scale"
SCENARIO = ROOT / "simulations" / "scenarios" / "digits_scale.toml"
MB = 1024 * 1024


def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    k, v = line.split(":", 1)
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    kids = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(x) for x in f.read().split())
    except OSError:
        pass
    return kids


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def _role(pid: int) -> str:
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        return "?"
    text = b" ".join(cmd).decode(errors="replace")
    if "resource_tracker" in text:
        return "resource-tracker"
    if "spawn_main" in text or "multiprocessing" in text:
        return "worker"
    return "main"


@dataclass
class TreeSampler:
    """Samples the process tree under `pid` every `interval` s until stopped."""

    pid: int
    interval: float = 0.1
    peak_rss: int = 0
    peak_pss: int = 0
    hwm: dict[int, tuple[str, int]] = field(default_factory=dict)   # pid -> (role, VmHWM)
    rss: dict[int, int] = field(default_factory=dict)               # pid -> largest sampled VmRSS
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self._stop.is_set():
            rss = pss = 0
            for p in _tree(self.pid):
                st = _status(p)
                if not st:
                    continue
                rss += st.get("VmRSS", 0)
                pss += _pss(p)
                role = self.hwm.get(p, (None, 0))[0] or _role(p)
                self.hwm[p] = (role, max(self.hwm.get(p, (role, 0))[1], st.get("VmHWM", 0)))
                self.rss[p] = max(self.rss.get(p, 0), st.get("VmRSS", 0))
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.samples += 1
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()


def round_times(state_dir: Path) -> tuple[list[float], list[float]]:
    """(open -> next open, open -> commit) per round, in seconds, from the coordinator's SQLite."""
    db = sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True)
    rows = db.execute("SELECT round, opened_ms, closed_ms FROM rounds ORDER BY round").fetchall()
    db.close()
    gaps = [(b[1] - a[1]) / 1000 for a, b in zip(rows, rows[1:])]
    commit = [(r[2] - r[1]) / 1000 for r in rows if r[2]]
    return gaps, commit


def run_once(registered: int, per_round: int, rounds: int, workers: int | None, tag: str) -> dict:
    out = WORK / f"run-{registered}-{tag}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "fedort", "simulate", str(SCENARIO), "--clients", str(registered),
           "--clients-per-round", str(per_round), "--rounds", str(rounds), "--out", str(out), "--no-progress"]
    if workers:
        cmd += ["--workers", str(workers)]
    fedort = shutil.which("fedort", path=str(Path(sys.executable).parent))
    if fedort:
        cmd = [fedort, *cmd[3:]]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = TreeSampler(proc.pid)
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    output = proc.communicate()[0]
    wall = time.perf_counter() - t0
    sampler.stop()
    thread.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{output[-3000:]}")
    final = json.loads((out / "metrics.json").read_text())["final"]
    gaps, commit = round_times(out / "state")
    by_role: dict[str, list[int]] = {}
    sampled: dict[str, list[int]] = {}
    for pid, (role, hwm) in sampler.hwm.items():
        by_role.setdefault(role, []).append(hwm)
        sampled.setdefault(role, []).append(sampler.rss.get(pid, 0))
    return {"registered": registered, "per_round": per_round, "rounds": rounds, "wall_s": wall,
            "sim_wall_s": final.get("wall_seconds"), "accuracy": final.get("test_accuracy"),
            "round_gap_s": gaps, "round_commit_s": commit,
            "peak_tree_rss": sampler.peak_rss, "peak_tree_pss": sampler.peak_pss,
            "hwm_by_role": {k: sorted(v, reverse=True) for k, v in by_role.items()},
            "sampled_rss_by_role": {k: sorted(v, reverse=True) for k, v in sampled.items()}, "samples": sampler.samples,
            "load1": os.getloadavg()[0]}


def _mb(x: float) -> str:
    return f"{x / MB:.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--registered", type=int, nargs="+", default=[100, 1000],
                    help="registered clients per run (default 100 1000)")
    ap.add_argument("--per-round", type=int, default=100, help="clients per round (default 100)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per run (default 5, as in the scenario)")
    ap.add_argument("--pairs", type=int, default=1, help="repeat the sequence, reversed every other time (default 1)")
    ap.add_argument("--workers", type=int, help="worker processes (default: the simulation's, one per core)")
    ap.add_argument("--quick", action="store_true", help="2 rounds")
    ap.add_argument("--json", type=Path, help="also write all runs to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds = 2
    WORK.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(f"# {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    runs = []
    for i in range(args.pairs):
        seq = args.registered if i % 2 == 0 else list(reversed(args.registered))
        for n in seq:
            r = run_once(n, min(args.per_round, n), args.rounds, args.workers, f"{i}")
            runs.append(r)
            gaps = r["round_gap_s"]
            roles = ", ".join(f"{k} {'/'.join(_mb(v) for v in vs)}" for k, vs in sorted(r["hwm_by_role"].items()))
            roles += "; largest sampled RSS: " + ", ".join(
                f"{k} {'/'.join(_mb(v) for v in vs)}" for k, vs in sorted(r["sampled_rss_by_role"].items()))
            print(f"{n:5d} registered, {r['per_round']} per round, {r['rounds']} rounds: wall {r['wall_s']:.1f} s "
                  f"(simulation {r['sim_wall_s']} s), round open->open median "
                  f"{statistics.median(gaps) if gaps else float('nan'):.2f} s, open->commit median "
                  f"{statistics.median(r['round_commit_s']):.2f} s; peak tree RSS {_mb(r['peak_tree_rss'])} MiB, "
                  f"PSS {_mb(r['peak_tree_pss'])} MiB; per-process peak RSS (MiB): {roles}; "
                  f"accuracy {r['accuracy']:.3f}; load {r['load1']:.1f}", flush=True)
    print()
    print("| registered | per round | wall s | round s (open->open, median) | peak tree PSS MiB | peak tree RSS MiB | main peak RSS MiB | worker peak RSS MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    med = {}
    for n in args.registered:
        rs = [r for r in runs if r["registered"] == n]
        pss = statistics.median(r["peak_tree_pss"] for r in rs)
        rss = statistics.median(r["peak_tree_rss"] for r in rs)
        main_hwm = statistics.median(max(r["hwm_by_role"].get("main", [0])) for r in rs)
        worker_hwm = statistics.median(max(r["hwm_by_role"].get("worker", [0])) for r in rs)
        gap = statistics.median(g for r in rs for g in r["round_gap_s"]) if any(r["round_gap_s"] for r in rs) else float("nan")
        wall = statistics.median(r["wall_s"] for r in rs)
        med[n] = (pss, rss, main_hwm, worker_hwm)
        print(f"| {n:,} | {rs[0]['per_round']} | {wall:.1f} | {gap:.2f} | {_mb(pss)} | {_mb(rss)} | {_mb(main_hwm)} | "
              f"{_mb(worker_hwm)} |")
    if len(args.registered) >= 2:
        lo, hi = min(args.registered), max(args.registered)
        extra = hi - lo
        print()
        for i, name in enumerate(("tree PSS", "tree RSS", "main process", "largest worker")):
            d = med[hi][i] - med[lo][i]
            print(f"{name}: {hi:,} vs {lo:,} registered: {d / MB:+.1f} MiB, {d / extra / 1024:+.2f} KiB per extra "
                  f"registered client")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
