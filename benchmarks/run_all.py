"""Run every benchmarks/bench_*.py in turn (what `make bench` calls) and say which failed.

Each script runs in its own process with this Python, so one crash or one script's memory does
not affect the next. Extra arguments go to every script (e.g. `--quick` where scripts take it).

    python benchmarks/run_all.py                 # all of them
    python benchmarks/run_all.py -k aggregation  # only scripts whose name contains "aggregation"
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", dest="pattern", default="", help="run only scripts whose name contains this")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to every script (after --)")
    args = ap.parse_args(argv)
    extra = args.args[1:] if args.args[:1] == ["--"] else args.args
    scripts = sorted(p for p in HERE.glob("bench_*.py") if args.pattern in p.stem)
    if not scripts:
        print(f"no benchmarks/bench_*.py matches {args.pattern!r}", file=sys.stderr)
        return 1
    failed = []
    for script in scripts:
        print(f"\n===== {script.name} =====", flush=True)
        t0 = time.perf_counter()
        code = subprocess.run([sys.executable, str(script), *extra], cwd=HERE.parent).returncode
        print(f"===== {script.name}: {'ok' if code == 0 else f'exit {code}'} in {time.perf_counter() - t0:.0f} s",
              flush=True)
        if code != 0:
            failed.append(script.name)
    print(f"\n{len(scripts) - len(failed)} of {len(scripts)} benchmarks ran"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
