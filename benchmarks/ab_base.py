"""Interleaved A/B: the same benchmark command on a base revision and on this checkout, alternating.

The base is `git archive REV` unpacked under benchmarks/.work/ab-REV, its `fedort/` package given
symlinks to the repository's folders (the layout pyproject's package-dir maps) and a
`sitecustomize` (both on PYTHONPATH) that drops this checkout's editable-install finder, so `fedort` there imports the
base's code (spawned worker processes too). Runs alternate base/branch, then branch/base, ...;
each run's lines that match `--grep` are printed with the side and the load average. With `--idle F`
each run starts only once the machine's CPUs were at least F idle over 1.5 s (waiting at most 120 s),
and the line also shows the idle fraction before and how busy the machine was during the run (other
sessions' work shows as a busier machine than the benchmark alone makes it).

    python benchmarks/ab_base.py --base 7b41888 --runs 3 -- bench_round_overhead.py --no-flower \\
        --sizes 5000000 --pairs 1 --rounds-large 10
    python benchmarks/ab_base.py --base 7b41888 --runs 3 --grep upload -- bench_transfer.py --reps 3
    python benchmarks/ab_base.py --base 9f8ae1d --runs 5 --idle 0.7 --grep RESULT -- bench_secagg_round.py \\
        --_trial 100000 100 8 1
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PACKAGES = ("protos", "coordinator", "edge_client", "simulations")
SITECUSTOMIZE = '''# ab_base.py: drop the editable install's finder so that `fedort` resolves to this base copy.
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__name__.lower()
                    and "editable" not in getattr(f, "__name__", "").lower()]
'''


def base_tree(rev: str) -> Path:
    """benchmarks/.work/ab-REV/src: the base revision's files, importable as `fedort` (see the docstring)."""
    top = HERE / ".work" / f"ab-{rev}"
    src = top / "src"
    if not (src / "fedort").is_dir():
        src.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        for name in PACKAGES:
            (src / "fedort" / name).symlink_to(Path("..") / name)
        (top / "site").mkdir(exist_ok=True)
        (top / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return src


def _cpu_times() -> tuple[int, int]:
    """(idle + iowait, total) jiffies of all CPUs since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return values[3] + values[4], sum(values)


def wait_idle(fraction: float, give_up_s: float = 120.0) -> float:
    """Until the CPUs were at least `fraction` idle over 1.5 s (or give_up_s passed); the last idle fraction."""
    deadline = time.monotonic() + give_up_s
    while True:
        (i0, t0), _ = _cpu_times(), time.sleep(1.5)
        i1, t1 = _cpu_times()
        idle = (i1 - i0) / max(1, t1 - t0)
        if idle >= fraction or time.monotonic() >= deadline:
            return idle


def run(side: str, root: Path, command: list[str], grep: list[str], env: dict[str, str], idle: float | None) -> None:
    before = f", idle before {wait_idle(idle):.2f}" if idle is not None else ""
    t0, load0, (i0, j0) = time.strftime("%H:%M:%S", time.gmtime()), os.getloadavg()[0], _cpu_times()
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / command[0]), *command[1:]], cwd=root, env=env,
                          capture_output=True, text=True)
    i1, j1 = _cpu_times()
    busy = f", machine busy {1 - (i1 - i0) / max(1, j1 - j0):.2f}" if idle is not None else ""
    lines = [ln for ln in proc.stdout.splitlines() if any(g in ln for g in grep)]
    if proc.returncode != 0:
        lines.append(f"FAILED ({proc.returncode}): {proc.stderr[-1500:]}")
    for ln in lines:
        print(f"{side:6s} [{t0} UTC, load {load0:.1f}-{os.getloadavg()[0]:.1f}{before}{busy}] {ln}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="base revision (e.g. the branch point)")
    ap.add_argument("--runs", type=int, default=3, help="runs per side (default 3)")
    ap.add_argument("--grep", nargs="+", default=["fedort ", "stream ", "upload", "download", "CPU"],
                    help="print output lines containing any of these")
    ap.add_argument("--idle", type=float, default=None, metavar="F",
                    help="start each run once the CPUs were at least F (0..1) idle over 1.5 s (at most 120 s wait)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- SCRIPT ARGS... (a script in benchmarks/)")
    args = ap.parse_args()
    command = [c for c in args.command if c != "--"]
    src = base_tree(args.base)
    base_env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src.parent / "site"), str(src)]))
    print(f"# A/B {' '.join(command)}: base {args.base} ({src}) vs this checkout ({ROOT}), {args.runs} runs each",
          flush=True)
    for i in range(args.runs):
        order = [("base", src, base_env), ("branch", ROOT, dict(os.environ))]
        for side, root, env in (order if i % 2 == 0 else order[::-1]):
            run(side, root, command, args.grep, env, args.idle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
