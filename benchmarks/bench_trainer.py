"""Training-loop overhead: `Trainer.fit` vs a bare `onnxruntime.training.api` loop, same steps, same data.

Both sides start every repeat from freshly loaded artifacts (not timed), draw the same per-epoch
permutations from `numpy.random.default_rng(seed)`, and run forward+backward, optimizer step and
lazy gradient reset per batch at a constant learning rate. The bare side calls ORT's `Module` /
`Optimizer` directly; the fedort side is `Trainer.fit` with the default `TrainingModule` (input
checks, metric logging, hooks included). Repeats are interleaved in ABBA order so drift on a
shared machine hits both sides alike; the figure is the median of the per-pair time ratios.
Both sides must end with identical parameters, which the script checks. Noise from other
processes only ever adds time, so the ratio of the two minimums is printed too.

    python benchmarks/bench_trainer.py                 # mlp, batch 32, 5 epochs, 30 pairs
    python benchmarks/bench_trainer.py --model cnn --repeats 10
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedort.ort import _training_api as _ort# noqa: E402
from fedort.ort.artifacts import CHECKPOINT, EVAL_MODEL, OPTIMIZER_MODEL, TRAINING_MODEL, build_artifacts  # noqa: E402
from fedort.ort.models import builtin_model  # noqa: E402
from fedort.edge_client.training.module import TrainingModule  # noqa: E402
from fedort.ort.session import SessionConfig, TrainingSession  # noqa: E402
from fedort.edge_client.training.trainer import Trainer  # noqa: E402


def digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return (bunch.data / 16.0).astype(np.float32), bunch.target.astype(np.int64)


def bare_loop(folder: Path, x: np.ndarray, y: np.ndarray, epochs: int, batch_size: int, lr: float,
              seed: int, threads: int) -> tuple[float, float, np.ndarray]:
    """What a user writes without fedort: ORT's Module and Optimizer, numpy batching."""
    import onnxruntime as ort

    api = _ort.training_api()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    state = api.CheckpointState.load_checkpoint(os.fspath(folder / CHECKPOINT))
    module = api.Module(os.fspath(folder / TRAINING_MODEL), state, os.fspath(folder / EVAL_MODEL),
                        device="cpu", session_options=options)
    optimizer = api.Optimizer(os.fspath(folder / OPTIMIZER_MODEL), module)
    optimizer.set_learning_rate(lr)
    module.train()
    start, cpu = time.perf_counter(), time.process_time()
    rng = np.random.default_rng(seed)
    n = len(y)
    for _ in range(epochs):
        perm = rng.permutation(n)
        xs, ys = x[perm], y[perm]
        for i in range(0, n, batch_size):
            module(xs[i:i + batch_size], ys[i:i + batch_size])
            optimizer.step()
            module.lazy_reset_grad()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return elapsed, cpu, module.get_contiguous_parameters(True).numpy().copy()


def fedort_loop(folder: Path, x: np.ndarray, y: np.ndarray, epochs: int, batch_size: int, lr: float,
                seed: int, threads: int) -> tuple[float, float, np.ndarray]:
    session = TrainingSession.from_artifacts(folder, config=SessionConfig(intra_op_threads=threads))
    module = TrainingModule(session, lr=lr)
    trainer = Trainer(max_epochs=epochs, batch_size=batch_size, shuffle=True, seed=seed)
    data = {"x": x, "labels": y}
    start, cpu = time.perf_counter(), time.process_time()
    trainer.fit(module, data)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return elapsed, cpu, session.to_buffer().copy()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=30, help="ABBA pairs (default 30)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="ORT intra-op threads on both sides (default 1: steadier on a shared machine; 0 = ORT default)")
    p.add_argument("--quick", action="store_true", help="10 pairs of 2 epochs (a smoke run, for run_all.py --quick)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.epochs = 10, 2

    x, y = digits()
    wall: dict[str, list[float]] = {"bare": [], "fedort": []}
    cpu: dict[str, list[float]] = {"bare": [], "fedort": []}
    wall_ratios, cpu_ratios = [], []
    loops = {"bare": bare_loop, "fedort": fedort_loop}
    with tempfile.TemporaryDirectory(prefix="fedort-bench-") as tmp:
        folder = Path(tmp)
        build_artifacts(builtin_model(args.model), folder)
        run = dict(x=x, y=y, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                   threads=args.threads)
        bare_loop(folder, **run), fedort_loop(folder, **run)  # warm-up (imports, allocator)
        for r in range(args.repeats):
            order = ("bare", "fedort") if r % 2 == 0 else ("fedort", "bare")
            results = {name: loops[name](folder, **run) for name in order}
            vb, vo = results["bare"][2], results["fedort"][2]
            if not np.array_equal(vb, vo):
                print(f"error: the two loops ended with different parameters (max diff {np.abs(vb - vo).max()})")
                return 1
            for name in loops:
                wall[name].append(results[name][0])
                cpu[name].append(results[name][1])
            wall_ratios.append(results["fedort"][0] / results["bare"][0])
            cpu_ratios.append(results["fedort"][1] / results["bare"][1])

    steps = args.epochs * -(-len(y) // args.batch_size)
    med = statistics.median
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cpus, "
          f"Python {platform.python_version()}, {platform.system()} {platform.release()}, "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print(f"workload: {args.model}, digits {len(y)} examples, batch {args.batch_size}, {args.epochs} epochs "
          f"= {steps} steps per run, {args.repeats} ABBA pairs, intra-op threads {args.threads or 'default'}")
    for label, times, ratios in (("wall", wall, wall_ratios), ("cpu ", cpu, cpu_ratios)):
        q = statistics.quantiles(ratios, n=4)
        print(f"{label}: bare {med(times['bare']) * 1e6 / steps:.0f} us/step, fedort "
              f"{med(times['fedort']) * 1e6 / steps:.0f} us/step; ratio fedort/bare median of pairs "
              f"{med(ratios):.3f} (IQR {q[0]:.3f}-{q[2]:.3f}), ratio of medians "
              f"{med(times['fedort']) / med(times['bare']):.3f}, ratio of minimums "
              f"{min(times['fedort']) / min(times['bare']):.3f}")
    print("target: ratio <= 1.05")
    return 0


if __name__ == "__main__":
    sys.exit(main())
