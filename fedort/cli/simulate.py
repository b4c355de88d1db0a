"""`fedort simulate`: a federated run of many clients on this machine (or a Ray cluster)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedort.cli.async_flags import FEDBUFF_KEYS, add_async_flags
from fedort.cli.privacy_flags import PRIVACY_KEYS, add_privacy_flags
from fedort.simulations.config import BACKENDS, load_config

EPILOG = """\
examples:
  fedort simulate digits_dirichlet --out runs/demo        # a bundled scenario (fedort simulate --list)
  fedort simulate my_scenario.toml --out runs/mine
  fedort simulate --clients 100 --clients-per-round 10 --partition shards:2 --rounds 50
  fedort simulate --artifacts my_artifacts --data my_clients --rounds 20 --backend ray

Settings come from the defaults, then the scenario file, then these flags.
The run folder gets metrics.csv, metrics.json, metrics.png, model.onnx (with model.onnx.data, its
parameters, for a model of 1 MiB of parameters or more) and the coordinator state.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="run a federated simulation on the real coordinator and edge clients",
        description="Run N simulated clients against a real coordinator over loopback gRPC; "
        "report accuracy per round, a plot and the final inference model.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "scenario",
        nargs="?",
        type=Path,
        help="scenario TOML file, or the name of a bundled one (e.g. digits_dirichlet; see --list)",
    )
    p.add_argument("--list", action="store_true", dest="list_scenarios", help="list the bundled scenarios and exit")
    p.add_argument("--clients", type=int, help="number of virtual clients (default 10)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--clients-per-round", type=int, metavar="M", help="clients selected each round")
    group.add_argument("--fraction", type=float, metavar="F", help="share of clients selected each round (default 1.0)")
    p.add_argument("--rounds", type=int, help="federated rounds (default 30)")
    p.add_argument(
        "--round-timeout-s",
        type=float,
        metavar="S",
        help="round deadline in seconds (default 300: the simulated cohort shares this machine's cores)",
    )
    p.add_argument("--name", help="label of the logs, summary and plot (default: the data set or --data folder)")
    p.add_argument(
        "--target-accuracy", type=float, metavar="A", help="accuracy the report and plot mark (default: none)"
    )
    p.add_argument(
        "--test-fraction", type=float, metavar="F", help="digits: share held out as the test set (default 0.2)"
    )
    p.add_argument("--partition", help="digits: iid | dirichlet:ALPHA | shards:K (default dirichlet:0.5)")
    p.add_argument(
        "--min-partition-size",
        type=int,
        metavar="K",
        help="dirichlet: every client gets at least K examples; draws that leave a client short are "
        "redrawn, then topped up from other clients' surplus (default 1)",
    )
    p.add_argument(
        "--dataset",
        metavar="SPEC",
        help="digits | synthetic:ALPHA,BETA (FedProx's Synthetic; model logreg) (default digits)",
    )
    model = p.add_mutually_exclusive_group()
    model.add_argument(
        "--model",
        choices=["mlp", "cnn", "logreg"],
        help="built-in model (default mlp for digits, logreg for synthetic)",
    )
    model.add_argument(
        "--artifacts", type=Path, help="your own artifacts folder (fedort artifacts build); needs --data"
    )
    p.add_argument("--data", type=Path, help="your own data: a folder of client-XXXX.npz + test.npz")
    p.add_argument("--local-epochs", type=int, metavar="E", help="local epochs per round (default 1)")
    p.add_argument("--batch-size", type=int, metavar="B", help="local batch size; 0 = whole client data (default 16)")
    p.add_argument("--lr", type=float, help="client learning rate (default 0.01)")
    p.add_argument(
        "--reset-optimizer",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="clients start each round with fresh optimizer state (default: on)",
    )
    p.add_argument("--optimizer", choices=["adamw", "sgd"], help="built-in model's optimizer (default adamw)")
    p.add_argument(
        "--prox-mu",
        metavar="MU",
        type=float,
        help="FedProx: clients add MU/2 * ||w - w_global||^2 to their loss; needs --optimizer sgd (default 0: FedAvg)",
    )
    p.add_argument("--backend", choices=BACKENDS, help="where clients run: local processes or Ray (default local)")
    p.add_argument("--ray-address", help="an existing Ray cluster (default: start a local Ray instance)")
    p.add_argument("--workers", type=int, help="worker processes (default: one per core)")
    p.add_argument("--seed", type=int, help="seeds partitions, selection and local shuffling (default 0)")
    p.add_argument(
        "--strategy",
        metavar="SPEC",
        help="aggregation: fedavg | clip:NORM | median | trimmed-mean:BETA | krum:F | multi-krum:F:M (default fedavg)",
    )
    p.add_argument(
        "--server-optimizer",
        metavar="SPEC",
        help="server update after aggregation: fedavg | fedavgm | fedadagrad | fedadam | fedyogi, options "
        "as NAME:KEY=VALUE,... e.g. fedadam:lr=0.01,tau=1e-3 (default fedavg)",
    )
    p.add_argument(
        "--byzantine-fraction",
        type=float,
        metavar="F",
        help="share of clients that attack with --attack, chosen by --seed (default 0)",
    )
    p.add_argument("--attack", metavar="SPEC", help="sign-flip[:K] | scale:K (default sign-flip, K = 4)")
    p.add_argument(
        "--straggler-fraction",
        type=float,
        metavar="F",
        help="share of clients, chosen by --seed, that do partial work each round (default 0)",
    )
    p.add_argument(
        "--straggler-steps", type=int, metavar="N", help="local optimizer steps a straggler stops after (default 1)"
    )
    p.add_argument(
        "--codec",
        metavar="SPEC",
        help="update codec of the virtual clients: raw (default), fp16, bf16, "
        "int8[:B], topk:F (error feedback), zstd+ any of them; the coordinator allows it",
    )
    p.add_argument(
        "--topk-warmup",
        metavar="FxR",
        help="top-k sparsity warm-up: FACTOR x F in round 1 decaying to F "
        "by round R, or 'off' (default 3x45; edge_client/uploads/topk_warmup.py)",
    )
    p.add_argument(
        "--export-every",
        type=int,
        metavar="N",
        help="write the inference model every N rounds and after the last; 0 = the final one only "
        "(default 1; other rounds keep their server eval in model.json)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help="keep the coordinator state in DIR (e.g. /dev/shm/run1: tmpfs, no disk fsyncs, but the "
        "state is lost at reboot; default OUT/state)",
    )
    p.add_argument(
        "--local-vectors",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="clients on this host pass vectors as files in the state dir; --no-local-vectors streams every "
        "vector over gRPC as a deployed device does (default: on)",
    )
    add_async_flags(p)
    p.add_argument(
        "--device-speed",
        metavar="SPEC",
        help="simulated compute time per client: uniform | lognormal:SIGMA | slow:F:K, served on a virtual "
        "clock by one worker (default uniform: real time)",
    )
    p.add_argument(
        "--step-seconds", type=float, metavar="S", help="simulated seconds per local step at speed 1 (default 0.01)"
    )
    p.add_argument("--out", type=Path, help="run folder (default runs/<timestamp>)")
    p.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None, help="a progress bar (default: on)"
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="log every coordinator and client event (default: progress bar and summary only)",
    )
    add_privacy_flags(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import logging

    if args.list_scenarios:
        from fedort.simulations.bundled_scenarios import listing

        print(listing())
        return 0
    from fedort.cli import leave_without_teardown
    from fedort.common.durable import fsync_tree
    from fedort.common.extras import require
    from fedort.simulations.backends import prepared_backend

    if not args.verbose:  # the per-update logs would bury the progress bar
        for name in ("coordinator", "fedort.coordinator", "fedort.edge", "edge_client"):
            logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))

    fields = (
        "name",
        "round_timeout_s",
        "target_accuracy",
        "test_fraction",
        "reset_optimizer",
        "clients",
        "clients_per_round",
        "fraction",
        "rounds",
        "partition",
        "min_partition_size",
        "dataset",
        "model",
        "artifacts",
        "data",
        "local_epochs",
        "batch_size",
        "lr",
        "optimizer",
        "prox_mu",
        "backend",
        "ray_address",
        "workers",
        "seed",
        "out",
        "progress",
        "export_every",
        "state_dir",
        "local_vectors",
        "strategy",
        "server_optimizer",
        "byzantine_fraction",
        "attack",
        "straggler_fraction",
        "straggler_steps",
        "codec",
        "topk_warmup",
        "device_speed",
        "step_seconds",
    )
    cfg = load_config(args.scenario, {k: getattr(args, k) for k in fields + FEDBUFF_KEYS + PRIVACY_KEYS})
    require("sim", "fedort simulate (data sets and the plot)")  # before any worker starts or round trains
    backend = prepared_backend(cfg)  # workers spawn now: their start-up overlaps the imports below
    try:
        from fedort.simulations.runner import run_simulation
    except BaseException:
        backend.stop()
        raise
    result = run_simulation(cfg, backend)
    print()
    print(result.summary)
    print()
    print(f"report: {result.out / 'metrics.csv'}, {result.out / 'metrics.json'}")
    print(f"plot:   {result.out / 'metrics.png'}")
    print(f"model:  {result.model}  (test accuracy {_pct(result.final.get('test_accuracy'))})")
    # every output durable; the coordinator's state already is (atomic writes, SQLite synchronous=FULL) and
    # the workers' download caches are no output: their fsyncs would be redundant
    fsync_tree(result.out, skip=("state", "cache"))
    leave_without_teardown()  # outputs durable: the process may skip the interpreter's teardown
    return 0


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.2f} %"
