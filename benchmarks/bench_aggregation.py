"""FedAvg aggregation throughput and memory: fedort's WeightedSum vs a memory floor, numpy and Flower.

For N client vectors of P float32 values (10-50 clients x 5-25 M values) it times, interleaved
and side by side in one run:

- `floor-f64`, `floor-f32`: one pass `acc += v` per client into an accumulator of that dtype —
  the memory-bandwidth floor for reading every update once.
- `wsum-f64`, `wsum-f32`: coordinator.aggregation.WeightedSum(P, dtype).add(v, n) per client, then .mean().
- `layers-np`: a list-of-layers numpy average (np.average over the stacked clients, per layer).
- `flwr-aggregate`: flwr.server.strategy.aggregate.aggregate([(layers, n), ...]).
- `flwr-inplace`: flwr.server.strategy.aggregate.aggregate_inplace([(None, FitRes), ...]); its
  input is Flower's wire form (Parameters of serialized layers), so it includes deserialization.

Throughput is client data read per second, N*P*4 bytes / time (the same numerator for every
method, so ratios are time ratios). Each ratio is taken within one repeat and the median over
repeats is reported. Before every timed call a 512 MB buffer is rewritten so that no method
starts from data left in the (large, 260 MB here) L3 cache. Peak memory is the tracemalloc peak
of one call beyond its inputs (numpy reports its buffers to tracemalloc).

Flower is kept out of fedort's dev venv (its protobuf<7 pin), so without flwr installed this script re-runs
itself under benchmarks/.work/venv-flwr (created on first use, see flower_venv.py); pass
--no-flower to skip Flower instead.

    python benchmarks/bench_aggregation.py            # full grid, ~5 minutes on 2 cores
    python benchmarks/bench_aggregation.py --quick    # small sizes, a few seconds
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
import tracemalloc
import types
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))


def _load_by_path(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_weighted_sum() -> type:
    """coordinator/aggregation/weighted_sum.py's WeightedSum, loaded by file path.

    Under the Flower venv (protobuf 6, fedort not installed) the packages' __init__ files must not
    run: `coordinator/__init__` imports the gRPC server and the stubs. weighted_sum.py
    needs only numpy, a few sibling modules and fedort/common/errors.py, so they are loaded
    under their real names inside empty stand-in packages (`fedort`, `fedort.protos`, ...).
    """
    if "fedort.common.errors" not in sys.modules:
        for name, path in (("fedort", ROOT / "fedort"), ("fedort.protos", ROOT / "protos"),
                           ("fedort.coordinator", ROOT / "coordinator"),
                           ("fedort.coordinator.aggregation", ROOT / "coordinator" / "aggregation")):
            if name not in sys.modules:
                pkg = types.ModuleType(name)
                pkg.__path__ = [str(path)]
                sys.modules[name] = pkg
        _load_by_path("fedort.common.errors", ROOT / "protos" / "errors.py")
    return _load_by_path("fedort.coordinator.aggregation.weighted_sum",
                         ROOT / "coordinator" / "aggregation" / "weighted_sum.py").WeightedSum


WeightedSum = load_weighted_sum()

MB = 1e6
POOL_BYTES = 1_500_000_000  # distinct input vectors held at once; cycled beyond that (> 5x L3)
FLUSH_BYTES = 512 << 20


def layer_sizes(p: int, layers: int = 10, bias: int = 512) -> list[int]:
    """An MLP-like layout of `p` values: `layers` (weight, bias) pairs."""
    weight = (p - layers * bias) // layers
    sizes = [weight, bias] * layers
    sizes[-2] += p - sum(sizes)
    return sizes


class Inputs:
    """N client updates (a pool of distinct vectors, cycled) in the forms each method takes."""

    def __init__(self, clients: int, p: int, seed: int = 0, flower: bool = True):
        rng = np.random.default_rng(seed)
        pool = max(1, min(clients, math.ceil(POOL_BYTES / (4 * p))))
        self.clients, self.p, self.pool = clients, p, pool
        distinct = [rng.standard_normal(p, dtype=np.float32) for _ in range(pool)]
        self.vectors = [distinct[i % pool] for i in range(clients)]
        self.weights = [int(w) for w in rng.integers(20, 500, size=clients)]
        cuts = np.cumsum(layer_sizes(p))[:-1]
        self.layers = [np.split(v, cuts) for v in self.vectors]
        self.fit_results = None
        if flower:
            from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

            ok = Status(code=Code.OK, message="")
            params = [ndarrays_to_parameters(np.split(v, cuts)) for v in distinct]
            self.fit_results = [(None, FitRes(status=ok, parameters=params[i % pool], num_examples=w, metrics={}))
                                for i, w in enumerate(self.weights)]

    @property
    def nbytes(self) -> int:
        return self.clients * self.p * 4


FOLD_TIME: dict[str, float] = {}  # seconds a method spent folding updates, without its final mean


def methods(inp: Inputs, flower: bool) -> dict[str, Callable[[], object]]:
    def floor(dtype, name):
        def run():
            acc = np.zeros(inp.p, dtype=dtype)
            t0 = time.perf_counter()
            for v in inp.vectors:
                acc += v
            FOLD_TIME[name] = time.perf_counter() - t0
            return acc
        return run

    def wsum(dtype, name):
        def run():
            s = WeightedSum(inp.p, np.dtype(dtype))
            t0 = time.perf_counter()
            for v, w in zip(inp.vectors, inp.weights):
                s.add(v, w)
            FOLD_TIME[name] = time.perf_counter() - t0
            return s.mean()
        return run

    def layers_np():
        w = np.asarray(inp.weights, dtype=np.float64)
        return [np.average(np.stack(layer), axis=0, weights=w) for layer in zip(*inp.layers)]

    out = {"floor-f64": floor(np.float64, "floor-f64"), "wsum-f64": wsum(np.float64, "wsum-f64"),
           "floor-f32": floor(np.float32, "floor-f32"), "wsum-f32": wsum(np.float32, "wsum-f32"),
           "layers-np": layers_np}
    if flower:
        from flwr.server.strategy.aggregate import aggregate, aggregate_inplace

        out["flwr-aggregate"] = lambda: aggregate(list(zip(inp.layers, inp.weights)))
        out["flwr-inplace"] = lambda: aggregate_inplace(inp.fit_results)
    return out


def check_agree(inp: Inputs, runs: dict[str, Callable[[], object]]) -> float:
    """Largest abs difference of every averaging method from a float64 numpy reference."""
    w = np.asarray(inp.weights, dtype=np.float64)
    ref = np.zeros(inp.p)
    for v, wi in zip(inp.vectors, w):
        ref += wi * v
    ref /= w.sum()
    worst = 0.0
    for name, run in runs.items():
        if name.startswith("floor"):
            continue
        got = run()
        got = np.concatenate(got) if isinstance(got, list) else got
        worst = max(worst, float(np.max(np.abs(got - ref))))
        del got
    return worst


def time_interleaved(runs: dict[str, Callable[[], object]], repeats: int
                     ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(whole-call seconds, fold-only seconds) per method, `repeats` rounds in rotating order."""
    names = list(runs)
    times: dict[str, list[float]] = {n: [] for n in names}
    folds: dict[str, list[float]] = {}
    flush = np.ones(FLUSH_BYTES // 8)
    for rep in range(repeats):
        order = names[rep % len(names):] + names[:rep % len(names)]  # rotate: no fixed position
        for name in order:
            flush += 1.0
            gc.collect()
            t0 = time.perf_counter()
            result = runs[name]()
            times[name].append(time.perf_counter() - t0)
            if name in FOLD_TIME:
                folds.setdefault(name, []).append(FOLD_TIME.pop(name))
            del result
    return times, folds


def peak_memory(run: Callable[[], object]) -> float:
    """Peak bytes allocated during one call beyond what existed before it (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    result = run()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del result
    return peak - base


def machine() -> dict:
    info = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__,
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "(unset)")}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:  # which BLAS kernel numpy would use; these element-wise loops do not call BLAS at all
        from threadpoolctl import threadpool_info
        info["blas"] = "; ".join(f"{p.get('internal_api')} {p.get('version')} {p.get('architecture')}"
                                 for p in threadpool_info() if p.get("user_api") == "blas") or "(none)"
    except ImportError:
        pass
    try:
        import flwr
        info["flwr"] = flwr.__version__ if hasattr(flwr, "__version__") else "installed"
    except ImportError:
        info["flwr"] = "(not installed)"
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="10,50", help="client counts (default: 10,50)")
    ap.add_argument("--params", default="5e6,25e6", help="vector lengths (default: 5e6,25e6)")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved repeats (default: 5)")
    ap.add_argument("--memory-clients", default="10,20,50", help="client counts for peak memory")
    ap.add_argument("--memory-params", default="5e6", help="vector length for peak memory")
    ap.add_argument("--no-flower", action="store_true", help="skip the Flower baselines")
    ap.add_argument("--quick", action="store_true", help="tiny grid for a smoke run")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    if args.quick:
        args.clients, args.params, args.repeats = "4,8", "1e6", 2
        args.memory_clients, args.memory_params = "4,8", "1e6"

    flower = not args.no_flower
    if flower:
        try:
            import flwr  # noqa: F401
        except ImportError:
            from flower_venv import reexec_under_flower
            reexec_under_flower(str(Path(__file__).resolve()))

    clients = [int(c) for c in args.clients.split(",")]
    params = [int(float(p)) for p in args.params.split(",")]
    info = machine()
    print("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    results = {"machine": info, "throughput": [], "memory": []}

    for p in params:
        for n in clients:
            inp = Inputs(n, p, flower=flower)
            runs = methods(inp, flower)
            err = check_agree(inp, runs) if p * n <= 50_000_000 else None
            times, folds = time_interleaved(runs, args.repeats)
            gbs = {k: inp.nbytes / statistics.median(v) / 1e9 for k, v in times.items()}
            fold_gbs = {k: inp.nbytes / statistics.median(v) / 1e9 for k, v in folds.items()}

            def ratio(fast: str, slow: str, t: dict = times) -> float:
                return statistics.median(s / f for f, s in zip(t[fast], t[slow]))

            # Against the floor: the folds alone (`add` vs `acc += v`); against the other methods:
            # whole calls, WeightedSum's final mean() included, as they return the average too.
            row = {"clients": n, "params": p, "pool": inp.pool, "gbps": gbs, "fold_gbps": fold_gbs,
                   "max_abs_err": err,
                   "wsum64_of_floor": ratio("wsum-f64", "floor-f64", folds),
                   "wsum32_of_floor": ratio("wsum-f32", "floor-f32", folds),
                   # best-of (min time) ratios: what each reaches when the shared machine lets it
                   "wsum64_of_floor_best": min(folds["floor-f64"]) / min(folds["wsum-f64"]),
                   "wsum32_of_floor_best": min(folds["floor-f32"]) / min(folds["wsum-f32"])}
            for ws in ("wsum-f64", "wsum-f32"):
                for other in [m for m in runs if not m.startswith(("floor", "wsum"))]:
                    row[f"{ws}_vs_{other}"] = ratio(ws, other)
            results["throughput"].append(row)
            print(f"done {n} clients x {p / 1e6:g} M (max |error| vs float64 reference: {err})", flush=True)
            del inp, runs
            gc.collect()

    rows = results["throughput"]
    print("\n## fold throughput vs the memory floor (GB/s of client data, medians; % = median of per-repeat "
          "ratios, (best-of: ratio of the fastest repeats))\n")
    print("| clients x params | floor f64 | WeightedSum f64 | of floor | floor f32 | WeightedSum f32 | of floor |")
    print("|" + " --- |" * 7)
    for r in rows:
        f = r["fold_gbps"]
        print(f"| {r['clients']} x {r['params'] / 1e6:g} M | {f['floor-f64']:.2f} | {f['wsum-f64']:.2f} | "
              f"{100 * r['wsum64_of_floor']:.0f} % ({100 * r['wsum64_of_floor_best']:.0f} %) | "
              f"{f['floor-f32']:.2f} | {f['wsum-f32']:.2f} | "
              f"{100 * r['wsum32_of_floor']:.0f} % ({100 * r['wsum32_of_floor_best']:.0f} %) |")
    others = [m for m in rows[0]["gbps"] if not m.startswith(("floor", "wsum"))]
    print("\n## whole aggregation, mean included (GB/s; speed-up of WeightedSum f64 / f32 = median of "
          "per-repeat time ratios)\n")
    print("| clients x params | WeightedSum f64 | WeightedSum f32 | " + " | ".join(others) + " | "
          + " | ".join(f"speed-up vs {o}" for o in others) + " |")
    print("|" + " --- |" * (3 + 2 * len(others)))
    for r in rows:
        g = r["gbps"]
        print(f"| {r['clients']} x {r['params'] / 1e6:g} M | {g['wsum-f64']:.2f} | {g['wsum-f32']:.2f} | "
              + " | ".join(f"{g[o]:.2f}" for o in others) + " | "
              + " | ".join(f"{r[f'wsum-f64_vs_{o}']:.1f}x / {r[f'wsum-f32_vs_{o}']:.1f}x" for o in others) + " |")

    mem_p = int(float(args.memory_params))
    print(f"\n## peak memory beyond the inputs, MB ({mem_p / 1e6:g} M float32 = {mem_p * 4 / MB:.0f} MB per vector)\n")
    mem_clients = [int(c) for c in args.memory_clients.split(",")]
    table: dict[str, dict[int, float]] = {}
    for n in mem_clients:
        inp = Inputs(n, mem_p, flower=flower)
        for name, run in methods(inp, flower).items():
            table.setdefault(name, {})[n] = peak_memory(run) / MB
        del inp
        gc.collect()
    print("| method | " + " | ".join(f"{n} clients" for n in mem_clients) + " |")
    print("|" + " --- |" * (len(mem_clients) + 1))
    for name, by_n in table.items():
        print(f"| {name} | " + " | ".join(f"{by_n[n]:.0f}" for n in mem_clients) + " |")
        results["memory"].append({"method": name, "params": mem_p, "peak_mb": by_n})
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
