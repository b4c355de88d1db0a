"""fedort's server optimizers with their DEFAULT options against Flower's strategies with theirs.

The same sequence of updates goes through both: each round the combined (aggregated) vector is
the current global plus a fixed random step d_t, and each side applies its own server update to
its own global. fedort: `parse_server_optimizer(NAME)` (no options). Flower: the current Message-API
strategies `flwr.serverapp.strategy.FedAvgM() / FedAdagrad() / FedAdam() / FedYogi()` (no
arguments); their FedAvg aggregation step is replaced by the given combined vector, so only the
server update is compared. Printed: max |fedort − Flower| of the global after every round, per
strategy (0 up to float32 rounding means the defaults and the math agree).

    python benchmarks/bench_server_opt_defaults.py --rounds 20 --params 10000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PAIRS = {"fedavgm": "FedAvgM", "fedadagrad": "FedAdagrad", "fedadam": "FedAdam", "fedyogi": "FedYogi"}

FLOWER_SIDE = r'''
import json, sys
import numpy as np
from flwr.common import Array, ArrayRecord, MetricRecord
import flwr.serverapp.strategy as strategies
from flwr.serverapp.strategy import fedavg

data = np.load(sys.argv[1])
x0, steps = data["x0"], data["steps"]
combined = {}

def given_mean(self, server_round, replies):   # FedAvg's aggregation replaced by the round's combined vector
    return ArrayRecord({"w": Array(combined["c"])}), MetricRecord({})

fedavg.FedAvg.aggregate_train = given_mean
out = {}
for name, cls in json.loads(sys.argv[2]).items():
    strategy, x = getattr(strategies, cls)(), x0.copy()
    trajectory = []
    for t, d in enumerate(steps, start=1):
        combined["c"] = (x + d).astype(np.float32)
        current = ArrayRecord({"w": Array(x)})
        strategy.current_arrays = current if cls == "FedAvgM" else {"w": x}
        arrays, _ = strategy.aggregate_train(t, [])
        x = arrays["w"].numpy().astype(np.float32)
        trajectory.append(x.tolist())
    out[name] = trajectory
print("RESULT " + json.dumps(out))
'''


def fedort_side(x0: np.ndarray, steps: np.ndarray) -> dict[str, list[np.ndarray]]:
    from fedort.coordinator.aggregation.server_optimizers import parse_server_optimizer

    out = {}
    for name in PAIRS:
        opt, x, trajectory = parse_server_optimizer(name), x0.copy(), []
        for d in steps:
            x = opt.apply(x, (x + d).astype(np.float32)).astype(np.float32)
            trajectory.append(x)
        out[name] = trajectory
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--params", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import flower_venv

    rng = np.random.default_rng(args.seed)
    x0 = rng.standard_normal(args.params).astype(np.float32)
    steps = (0.05 * rng.standard_normal((args.rounds, args.params))).astype(np.float32)
    ours = fedort_side(x0, steps)
    py = flower_venv.ensure()
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(Path(tmp) / "updates.npz", x0=x0, steps=steps)
        theirs = flower_venv.run_trial(py, Path(tmp) / "flower_side.py", FLOWER_SIDE,
                                       [Path(tmp) / "updates.npz", json.dumps(PAIRS)], timeout=600)
    version = subprocess.run([str(py), "-c", "import flwr; print(flwr.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    print(f"fedort defaults vs flwr {version} flwr.serverapp.strategy defaults, {args.rounds} rounds x "
          f"{args.params} values")
    for name, cls in PAIRS.items():
        diff = [float(np.abs(a - np.asarray(b, np.float32)).max()) for a, b in zip(ours[name], theirs[name])]
        moved = float(np.abs(ours[name][-1] - x0).max())
        print(f"  {name:<11} vs {cls:<10} max |diff| over rounds {max(diff):.3g} (largest move {moved:.3g})")


if __name__ == "__main__":
    main()
