"""`fedort coordinator serve|status`: run a coordinator, or inspect a state dir offline.

`serve` builds a CoordinatorConfig from `--config FILE.toml` and flags (flags win), serves until
the run is DONE or FAILED, lingers briefly so polling clients hear DONE, and stops. SIGTERM and
SIGINT stop it gracefully: in-flight calls get a grace period, and every file and row is written
atomically, so restarting with the same --state-dir resumes the run. `status` reads SQLite
read-only, so it works while a server runs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import time
from pathlib import Path

from coordinator.config import CoordinatorConfig
from coordinator.rounds import RoundState
from coordinator.server import Coordinator
from coordinator.status import format_status, offline_status

log = logging.getLogger("coordinator")

LINGER_S = 10.0  # after the run ends, how long to keep answering DONE to clients that still poll


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("coordinator", help="run or inspect a federated coordinator")
    sub = parser.add_subparsers(dest="coordinator_command", metavar="ACTION", required=True)

    serve = sub.add_parser("serve", help="serve a federated run over gRPC from a durable state dir")
    serve.add_argument("--config", metavar="FILE.toml", type=Path, help="TOML file ([coordinator] table); flags override it")
    serve.add_argument("--artifacts", metavar="DIR", type=Path, help="training artifacts folder (fedort artifacts build)")
    serve.add_argument("--state-dir", metavar="DIR", type=Path, help="durable state: SQLite, vectors, spool, exported models")
    serve.add_argument("--address", metavar="HOST:PORT", help="HOST:PORT to listen on; port 0 picks one (default 127.0.0.1:7420)")
    serve.add_argument("--port-file", metavar="FILE", type=Path, help="write the bound port here once serving")
    serve.add_argument("--rounds", metavar="N", type=int, help="number of rounds (default 3)")
    serve.add_argument("--min-clients", metavar="K", type=int, help="updates a round needs (default 2)")
    serve.add_argument("--min-available-clients", metavar="K", type=int, help="clients available before a round starts "
                                                                 "(default: --min-clients)")
    serve.add_argument("--fraction", metavar="F", type=float, help="share of available clients selected per round (default 1.0)")
    serve.add_argument("--round-timeout", type=float, dest="round_timeout_s", metavar="S", help="round deadline in s (default 60)")
    serve.add_argument("--max-round-attempts", metavar="N", type=int, help="attempts before the run fails (default 3)")
    serve.add_argument("--local-epochs", metavar="E", type=int, help="clients' local epochs per round (default 1)")
    serve.add_argument("--batch-size", metavar="B", type=int, help="clients' batch size; 0 = each client's whole data (default 32)")
    serve.add_argument("--lr", type=float, help="clients' learning rate (default 0.05)")
    serve.add_argument("--seed", type=int, help="selection and shuffling seed (default 0)")
    serve.add_argument("--eval-data", metavar="FILE.npz", type=Path, help="held-out .npz evaluated on the server after each round")
    serve.add_argument("--fraction-evaluate", metavar="F", type=float, help="share of clients evaluating the final model (default 0)")
    serve.add_argument("--client-timeout", type=float, dest="client_timeout_s", metavar="S",
                       help="a client unseen this long is not selected; 0 disables (default 60)")
    serve.add_argument("--keep-spool", action="store_true", default=None, help="keep spooled updates after commit")
    serve.set_defaults(func=serve_command)

    status = sub.add_parser("status", help="print rounds, clients and the latest model of a state dir")
    status.add_argument("--state-dir", type=Path, required=True, metavar="DIR", help="the coordinator's state dir")
    status.set_defaults(func=status_command)


_FLAG_KEYS = ("artifacts", "state_dir", "address", "port_file", "rounds", "min_clients", "min_available_clients",
              "fraction", "round_timeout_s", "max_round_attempts", "local_epochs", "batch_size", "lr", "seed",
              "eval_data", "fraction_evaluate", "client_timeout_s", "keep_spool")


def config_from_args(args: argparse.Namespace) -> CoordinatorConfig:
    """Defaults < --config TOML < flags."""
    return CoordinatorConfig.load(args.config, **{k: getattr(args, k) for k in _FLAG_KEYS})


def serve_command(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    return asyncio.run(serve(config))


async def serve(config: CoordinatorConfig) -> int:
    """Run one coordinator until DONE/FAILED or a stop signal; the exit code says which."""
    coordinator = Coordinator(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
        except (NotImplementedError, RuntimeError):  # e.g. Windows event loops: Ctrl-C still interrupts
            pass
    try:
        await coordinator.start()
        done = asyncio.ensure_future(coordinator.wait_done())
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait({done, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not done.done():
            done.cancel()
            log.info("stop requested; shutting down (restart with the same --state-dir to resume)")
            return 0
        stopper.cancel()
        outcome = done.result()
        deadline = time.monotonic() + LINGER_S
        while not coordinator.engine.all_released() and time.monotonic() < deadline and not stop.is_set():
            await asyncio.sleep(0.1)
        if outcome.state is RoundState.FAILED:
            log.error("run failed: %s", outcome.message)
            return 1
        log.info("run done: %d rounds committed; latest model in %s", outcome.rounds_completed,
                 config.state_dir / "models" / "latest.json")
        return 0
    finally:
        await coordinator.stop(grace=5.0)
        for sig in handled:
            loop.remove_signal_handler(sig)


def status_command(args: argparse.Namespace) -> int:
    print(format_status(offline_status(args.state_dir)))
    return 0
