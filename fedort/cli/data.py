"""`fedort data ...`: write partitioned client data to a folder a simulation (or a user) can read.

    fedort data digits --clients 10 --partition dirichlet:0.5 --seed 0 --out runs/data
    fedort data synthetic --alpha 1 --beta 1 --clients 30 --seed 0 --out runs/synthetic

writes `client-0000.npz` ... (arrays `x`, `labels`, optionally `val_x`, `val_labels`),
`test.npz` and `partition.json` (spec, seed, sizes and the label histogram of every client).
`synthetic` is the FedProx paper's Synthetic(α, β) (`simulations/data/synthetic.py`; model: `logreg`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from fedort.common.errors import ConfigError
from fedort.common.settings.options import add_flags, deprecated_flag, options
from fedort.simulations.config import SimulationConfig
from fedort.simulations.data.datasets import (
    CLIENT_FILE,
    TEST_FILE,
    client_file_name,
    load_digits_split,
    save_npz,
    subset,
)
from fedort.simulations.data.partition import Partition, Parts, label_histogram, parse_partition

PARTITION_FILE = "partition.json"
# `fedort data digits` defaults: the simulation's, but an IID split (a neutral one unless told otherwise;
# a simulation defaults to the non-IID benchmark, dirichlet:0.5)
DIGITS_DEFAULTS = {"clients": 10, "partition": "iid", "seed": 0, "test_fraction": 0.2, "min_partition_size": 1}
TABLE_ROWS = 20  # more clients than this: the table shows the first rows and a size summary


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fedort data` and its `digits` subcommand."""
    data = subparsers.add_parser(
        "data",
        help="prepare partitioned client data for simulations",
        description="Prepare partitioned client data for simulations.",
    )
    sets = data.add_subparsers(dest="dataset", metavar="DATASET", required=True)
    digits = sets.add_parser(
        "digits",
        help="scikit-learn's bundled 8x8 digits (1,797 images, 10 labels)",
        description="Split scikit-learn's digits into a test set and per-client training files.",
    )
    # the keys a simulation also has: its flags, help and (but for partition) defaults
    table = {o.key: o for o in options(SimulationConfig)}
    add_flags(digits, [table[k] for k in DIGITS_DEFAULTS], defaults={"partition": str(DIGITS_DEFAULTS["partition"])})
    digits.set_defaults(**DIGITS_DEFAULTS)
    deprecated_flag(digits, "--min-size", "min_partition_size", type=int)
    digits.add_argument(
        "--val-fraction",
        type=float,
        default=0.0,
        help="share of each client's examples stored as val_x/val_labels (default: 0)",
    )
    digits.add_argument("--out", required=True, type=Path, help="folder to write the files into")
    digits.add_argument(
        "--overwrite", action="store_true", help="replace client files already in --out (otherwise that is an error)"
    )
    digits.set_defaults(func=_run_digits)

    syn = sets.add_parser(
        "synthetic",
        help="Synthetic(alpha, beta) of the FedProx paper: 60 features, 10 classes, non-IID",
        description="Per-client logistic models (heterogeneity alpha) and input distributions (beta), "
        "power-law client sizes; train with the built-in logreg model.",
    )
    syn.add_argument("--alpha", type=float, required=True, help="spread of the clients' models (0, 0.5, 1, ...)")
    syn.add_argument("--beta", type=float, required=True, help="spread of the clients' input means (0, 0.5, 1, ...)")
    syn.add_argument("--clients", type=int, default=30, help="number of clients (default: 30, as in the paper)")
    syn.add_argument("--seed", type=int, default=0, help="seed of every draw (default: 0)")
    syn.add_argument(
        "--test-fraction",
        type=float,
        default=0.1,
        help="share of each client's rows pooled into test.npz (default: 0.1)",
    )
    syn.add_argument("--out", required=True, type=Path, help="folder to write the files into")
    syn.add_argument(
        "--overwrite", action="store_true", help="replace client files already in --out (otherwise that is an error)"
    )
    syn.set_defaults(func=_run_synthetic)


def _run_digits(args: argparse.Namespace) -> int:
    from fedort.common.extras import require

    require("sim", "fedort data digits (the digits data set comes from scikit-learn)", needs=("sklearn",))
    spec = parse_partition(args.partition)
    if not 0.0 <= args.val_fraction < 1.0:
        raise ConfigError(f"--val-fraction must be in [0, 1), got {args.val_fraction}")
    train, test = load_digits_split(args.test_fraction, args.seed)
    parts = spec(train["labels"], args.clients, args.seed, min_size=args.min_partition_size)
    out = _prepare_out(args.out, args.overwrite)  # only once the inputs proved valid
    rng = np.random.default_rng([args.seed, 1])  # own stream: the val split never shifts the partition
    for i, idx in enumerate(parts):
        save_npz(out / client_file_name(i), _with_validation(subset(train, idx), args.val_fraction, rng))
    save_npz(out / TEST_FILE, test)
    summary = _summary(spec, args, train["labels"], parts, len(test["labels"]))
    (out / PARTITION_FILE).write_text(_json_rows(summary))
    print(format_table(summary))
    print(f"wrote {len(parts)} client files, {TEST_FILE} and {PARTITION_FILE} to {out}")
    return 0


def _run_synthetic(args: argparse.Namespace) -> int:
    from fedort.simulations.data.synthetic import CLASSES, SyntheticSpec, synthetic_split

    spec = SyntheticSpec(args.alpha, args.beta)
    clients, test = synthetic_split(spec.alpha, spec.beta, args.clients, args.seed, args.test_fraction)
    out = _prepare_out(args.out, args.overwrite)
    for i, arrays in enumerate(clients):
        save_npz(out / client_file_name(i), arrays)
    save_npz(out / TEST_FILE, test)
    labels = np.concatenate([c["labels"] for c in clients])
    bounds = np.cumsum([0] + [len(c["labels"]) for c in clients])
    parts = [np.arange(bounds[i], bounds[i + 1]) for i in range(len(clients))]
    summary = {
        "dataset": str(spec),
        "partition": "natural (one logistic model per client)",
        "clients": len(clients),
        "seed": args.seed,
        "test_fraction": args.test_fraction,
        "train_examples": int(len(labels)),
        "test_examples": int(len(test["labels"])),
        "num_classes": CLASSES,
        "sizes": [len(p) for p in parts],
        "label_histogram": label_histogram(labels, parts, CLASSES).tolist(),
    }
    (out / PARTITION_FILE).write_text(_json_rows(summary))
    print(format_table(summary))
    print(f"wrote {len(clients)} client files, {TEST_FILE} and {PARTITION_FILE} to {out}")
    return 0


def _prepare_out(out: Path, overwrite: bool) -> Path:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    old = [p for p in out.iterdir() if CLIENT_FILE.match(p.name) or p.name in (TEST_FILE, PARTITION_FILE)]
    if old and not overwrite:
        raise ConfigError(
            f"--out {out} already holds data files ({len(old)}, e.g. {sorted(old)[0].name}); "
            f"pass --overwrite to replace them or choose an empty folder"
        )
    for p in old:
        p.unlink()
    return out


def _with_validation(arrays: dict, fraction: float, rng: np.random.Generator) -> dict:
    n = len(arrays["labels"])
    n_val = int(round(n * fraction))
    if n_val == 0:
        return arrays
    if n_val >= n:
        n_val = n - 1  # a client keeps at least one training example
    perm = rng.permutation(n)
    val, keep = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    out = {name: a[keep] for name, a in arrays.items()}
    out.update({f"val_{name}": a[val] for name, a in arrays.items()})
    return out


def _summary(spec: Partition, args: argparse.Namespace, labels: np.ndarray, parts: Parts, test_size: int) -> dict:
    hist = label_histogram(labels, parts, num_classes=10)
    return {
        "dataset": "digits",
        "partition": str(spec),
        "clients": len(parts),
        "seed": args.seed,
        "test_fraction": args.test_fraction,
        "val_fraction": args.val_fraction,
        "train_examples": int(len(labels)),
        "test_examples": int(test_size),
        "num_classes": 10,
        "sizes": [int(len(p)) for p in parts],
        "label_histogram": hist.tolist(),
    }


def _json_rows(summary: dict) -> str:
    """JSON with one key per line and one histogram row per line (readable for 1,000 clients)."""
    lines = []
    for key, value in summary.items():
        if key == "label_histogram":
            rows = ",\n  ".join(json.dumps(r) for r in value)
            lines.append(f' "{key}": [\n  {rows}\n ]')
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def format_table(summary: dict) -> str:
    """The short terminal table: one row per client (the first TABLE_ROWS), labels as counts."""
    sizes, hist = summary["sizes"], summary["label_histogram"]
    head = (
        f"{summary['dataset']}: {summary['train_examples']} train / {summary['test_examples']} test examples, "
        f"{summary['clients']} clients, partition {summary['partition']}, seed {summary['seed']}"
    )
    classes = range(summary["num_classes"])
    lines = [head, "client    size  labels  " + " ".join(f"{c:>4}" for c in classes)]
    for i in range(min(len(sizes), TABLE_ROWS)):
        row = hist[i]
        lines.append(f"{i:>6}  {sizes[i]:>6}  {sum(1 for v in row if v):>6}  " + " ".join(f"{v:>4}" for v in row))
    if len(sizes) > TABLE_ROWS:
        lines.append(f"   ... {len(sizes) - TABLE_ROWS} more clients")
    s = np.asarray(sizes)
    labels_per_client = (np.asarray(hist) > 0).sum(axis=1)
    lines.append(
        f"size min/median/max {s.min()}/{int(np.median(s))}/{s.max()}; "
        f"labels per client min/median/max {labels_per_client.min()}/"
        f"{int(np.median(labels_per_client))}/{labels_per_client.max()}"
    )
    return "\n".join(lines)


__all__ = ["register", "format_table", "PARTITION_FILE"]
