"""`fedort simulate`: a federated run of many clients on this machine (or a Ray cluster)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedort.cli.async_flags import FEDBUFF_KEYS, add_async_flags
from fedort.cli.privacy_flags import PRIVACY_KEYS, add_privacy_flags
from fedort.common.settings.options import add_flags, options
from fedort.simulations.config import GROUPS, SimulationConfig, load_config

# flags of which at most one may be given
EXCLUSIVE = (("clients_per_round", "fraction"), ("model", "artifacts"))

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
    p.add_argument(
        "--verbose",
        action="store_true",
        help="log every coordinator and client event (default: progress bar and summary only)",
    )
    table = options(SimulationConfig)
    for title in GROUPS:
        group = p.add_argument_group(title)
        rows = [o for o in table if o.group == title]
        for pair in EXCLUSIVE:
            together = [o for o in rows if o.key in pair]
            if together:
                add_flags(group.add_mutually_exclusive_group(), together)
        add_flags(group, [o for o in rows if not any(o.key in pair for pair in EXCLUSIVE)])
    add_async_flags(p)
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
    from fedort.simulations.workers.backends import prepared_backend

    if not args.verbose:  # the per-update logs would bury the progress bar
        for name in ("coordinator", "fedort.coordinator", "fedort.edge", "edge_client"):
            logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))

    keys = [o.key for o in options(SimulationConfig)] + [*FEDBUFF_KEYS, *PRIVACY_KEYS]
    cfg = load_config(args.scenario, {k: getattr(args, k) for k in keys})
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
