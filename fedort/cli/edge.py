"""`fedort edge run`: run this device as an edge client of a coordinator until the run is done.

Exit codes: 0 when the coordinator says the run is done; 1 when it ended the run FAILED, or on an
error retrying cannot fix
(bad data, wrong model, rejected credential, coordinator unreachable for longer than
--give-up-after-s; the message says which); 130 after SIGINT and 143 after SIGTERM — the client
finishes or abandons the current step, tells the coordinator it leaves, and exits. A second
signal exits at once.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from fedort.common.errors import FedortError
from fedort.common.invariants import present
from fedort.common.settings.options import add_flags, deprecated_flag, options
from fedort.edge_client.client.config import EdgeConfig
from fedort.edge_client.transport.retry import Backoff

_SIGNAL_EXIT: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143}


def register(subparsers) -> None:
    edge = subparsers.add_parser(
        "edge", help="run this device as an edge client", description="Device-side commands of fedort."
    )
    sub = edge.add_subparsers(dest="edge_command", metavar="SUBCOMMAND")
    run = sub.add_parser(
        "run",
        help="join a coordinator and train rounds on local data until the run is done",
        description=(
            "Join the coordinator, download the training artifacts (cached by sha256 in the cache "
            "folder), then long-poll for tasks: train each round on the local data and upload the "
            "update, evaluate when asked, and exit 0 when the coordinator says the run is done. "
            "Unreachable coordinators are retried with exponential backoff; the client id is kept "
            "in the cache folder, so a restarted client (or coordinator) resumes as the same client."
        ),
        epilog="exit codes: 0 done, 1 error or run FAILED, 130 SIGINT, 143 SIGTERM",
    )
    run.add_argument("--config", metavar="FILE.toml", help="settings in an [edge] table; flags override them")
    table = [o for o in options(EdgeConfig) if o.key != "token"]
    add_flags(run, table)
    token = run.add_mutually_exclusive_group()
    add_flags(token, [o for o in options(EdgeConfig) if o.key == "token"])
    token.add_argument("--token-file", metavar="FILE", help="read the device token from this file")
    run.add_argument(
        "--give-up-after-s",
        type=float,
        metavar="SECONDS",
        help="stop retrying an unreachable coordinator after this long ([edge.backoff] give_up_after_s; default 300)",
    )
    deprecated_flag(run, "--cert", "cert_file")
    deprecated_flag(run, "--key", "key_file")
    deprecated_flag(run, "--give-up-after", "give_up_after_s", type=float)
    run.add_argument("--debug-modules", metavar="FILE", help=argparse.SUPPRESS)
    run.set_defaults(func=_run)
    edge.set_defaults(func=lambda args: (edge.print_help(), 2)[1])


def _token(args: argparse.Namespace) -> str | None:
    """--token, else --token-file, else $FEDORT_TOKEN, else None (a config file's `token` may give one)."""
    if args.token:
        return args.token.strip()
    if args.token_file:
        from fedort.common.errors import ConfigError

        try:
            return Path(args.token_file).read_text().strip()
        except OSError as e:
            raise ConfigError(f"cannot read --token-file {args.token_file}: {e.strerror}") from None
    return os.environ.get("FEDORT_TOKEN", "").strip() or None


def _run(args: argparse.Namespace) -> int:
    from fedort.edge_client.client.edge_client import EdgeClient, RoundReport

    overrides = {o.key: getattr(args, o.key) for o in options(EdgeConfig) if o.flag}
    overrides["token"] = _token(args)
    if args.give_up_after_s is not None:
        overrides["backoff"] = Backoff(give_up_after_s=args.give_up_after_s)
    config = EdgeConfig.load(args.config, **overrides)
    if config.data is None:
        from fedort.common.errors import ConfigError

        raise ConfigError("edge client needs local data (--data CLIENT.npz or `data` key)")

    def on_report(r: RoundReport) -> None:
        metrics = " ".join(f"{k}={v:.4g}" for k, v in sorted(r.metrics.items()))
        cached = ", global vector cached" if r.vector_cached else ""
        print(
            f"round {r.round} {r.kind}: {r.num_examples} examples, {r.seconds:.2f} s, {r.outcome}{cached}"
            + (f"  {metrics}" if metrics else ""),
            flush=True,
        )

    client = EdgeClient(config, on_report=on_report)
    received: list[int] = []

    def on_signal(signum, frame) -> None:
        if received:  # second signal: no more politeness
            os._exit(_SIGNAL_EXIT.get(signum, 1))
        received.append(signum)
        client.stop(f"signal {signal.Signals(signum).name}")  # training ends after the current batch

    previous = {s: signal.signal(s, on_signal) for s in _SIGNAL_EXIT}
    try:
        info = client.join()
        print(
            f"joined {config.coordinator} as {info.client_id} (model {info.model_id[:12]}, "
            f"{client.data.num_examples} local examples)",
            flush=True,
        )
        summary = client.run()
    except FedortError:
        if not received:  # a real error: the dispatcher prints it and exits 1
            raise
        summary = None
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if args.debug_modules:
            Path(args.debug_modules).write_text(json.dumps(sorted(sys.modules)))
    if received:
        print(f"stopped by {signal.Signals(received[0]).name}", file=sys.stderr, flush=True)
        return _SIGNAL_EXIT.get(received[0], 1)
    summary = present(summary, "the run's summary")  # None only when a signal stopped the run
    if summary.outcome == "failed":
        print(
            f"fedort: error: the coordinator ended the run FAILED ({len(summary.rounds_trained)} round(s) trained "
            f"here as {summary.client_id}); its log and `fedort coordinator status` say why",
            file=sys.stderr,
            flush=True,
        )
        return 1
    print(f"done: {len(summary.rounds_trained)} round(s) trained as {summary.client_id}", flush=True)
    return 0
