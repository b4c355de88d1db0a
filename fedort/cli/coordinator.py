"""`fedort coordinator serve|status|enroll|revoke|devices`: run a coordinator, inspect a state dir, manage devices.

`enroll NAME` issues a device token (printed once; only its salted hash is stored in the state
dir), `revoke NAME|ID` withdraws it (effective on the device's next call), `devices` lists them.

`serve` builds a CoordinatorConfig from `--config FILE.toml` and flags (flags win), serves until
the run is DONE or FAILED, lingers briefly so polling clients hear DONE, and stops. SIGTERM and
SIGINT stop it gracefully: in-flight calls get a grace period, and every file and row is written
atomically, so restarting with the same --state-dir resumes the run. `status` reads SQLite
read-only, so it works while a server runs.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import logging
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from fedort.cli.async_flags import add_async_flags
from fedort.cli.privacy_flags import PRIVACY_KEYS, add_privacy_flags
from fedort.common.round_state import RoundState
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.server import Coordinator
from fedort.coordinator.status import format_status, offline_status

log = logging.getLogger("coordinator")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("coordinator", help="run or inspect a federated coordinator")
    sub = parser.add_subparsers(dest="coordinator_command", metavar="ACTION", required=True)

    serve = sub.add_parser("serve", help="serve a federated run over gRPC from a durable state dir")
    serve.add_argument(
        "--config",
        metavar="FILE.toml",
        type=Path,
        help="TOML file ([coordinator] table); flags override it. Relative paths in the file resolve "
        "against the file's folder (relative paths in flags against the current directory)",
    )
    serve.add_argument(
        "--artifacts", metavar="DIR", type=Path, help="training artifacts folder (fedort artifacts build)"
    )
    serve.add_argument(
        "--state-dir", metavar="DIR", type=Path, help="durable state: SQLite, vectors, spool, exported models"
    )
    serve.add_argument(
        "--address", metavar="HOST:PORT", help="HOST:PORT to listen on; port 0 picks one (default 127.0.0.1:7420)"
    )
    serve.add_argument("--port-file", metavar="FILE", type=Path, help="write the bound port here once serving")
    serve.add_argument("--rounds", metavar="N", type=int, help="number of rounds (default 3)")
    serve.add_argument("--min-clients", metavar="K", type=int, help="updates a round needs (default 2)")
    serve.add_argument(
        "--min-available-clients",
        metavar="K",
        type=int,
        help="clients available before a round starts (default: --min-clients)",
    )
    serve.add_argument(
        "--fraction", metavar="F", type=float, help="share of available clients selected per round (default 1.0)"
    )
    serve.add_argument(
        "--round-timeout", type=float, dest="round_timeout_s", metavar="S", help="round deadline in s (default 60)"
    )
    serve.add_argument("--max-round-attempts", metavar="N", type=int, help="attempts before the run fails (default 3)")
    serve.add_argument("--local-epochs", metavar="E", type=int, help="clients' local epochs per round (default 1)")
    serve.add_argument(
        "--batch-size", metavar="B", type=int, help="clients' batch size; 0 = each client's whole data (default 32)"
    )
    serve.add_argument("--lr", type=float, help="clients' learning rate (default 0.05)")
    serve.add_argument(
        "--prox-mu",
        metavar="MU",
        type=float,
        help="FedProx: clients add MU/2 * ||w - w_global||^2 to their loss; needs SGD artifacts (default 0: FedAvg)",
    )
    serve.add_argument("--seed", type=int, help="selection and shuffling seed (default 0)")
    serve.add_argument(
        "--eval-data", metavar="FILE.npz", type=Path, help="held-out .npz evaluated on the server after each round"
    )
    serve.add_argument(
        "--fraction-evaluate", metavar="F", type=float, help="share of clients evaluating the final model (default 0)"
    )
    serve.add_argument(
        "--client-timeout",
        type=float,
        dest="client_timeout_s",
        metavar="S",
        help="a client unseen this long is not selected; 0 disables (default 60)",
    )
    serve.add_argument(
        "--done-grace",
        type=float,
        dest="done_grace_s",
        metavar="S",
        help="after the run ends, keep answering up to S seconds so every device learns the outcome "
        "and exits at once (default 10; stops sooner once all have asked; 0 = stop at once)",
    )
    serve.add_argument("--keep-spool", action="store_true", default=None, help="keep spooled updates after commit")
    serve.add_argument(
        "--export-external-bytes",
        metavar="N",
        type=int,
        help="export a model whose trainable parameters take >= N bytes as model.onnx + model.onnx.data "
        "(ONNX external data, a hard link to the round's global vector: no per-round copy); "
        "smaller ones as one self-contained model.onnx; 0 = always (default 1048576)",
    )
    serve.add_argument(
        "--local-vector-dir",
        metavar="DIR",
        type=Path,
        help="devices on THIS host may pass vectors as files in DIR (on the state dir's filesystem) "
        "instead of gRPC streams; only for devices trusted like the state dir (default: off)",
    )
    sec = serve.add_argument_group("security (TLS, or an explicit --insecure, is required)")
    sec.add_argument("--tls-cert", metavar="CERT.pem", type=Path, help="server certificate chain (PEM)")
    sec.add_argument("--tls-key", metavar="KEY.pem", type=Path, help="server private key (PEM)")
    sec.add_argument(
        "--tls-client-ca",
        metavar="CA.pem",
        type=Path,
        help="require client certificates signed by this CA (mutual TLS)",
    )
    sec.add_argument(
        "--tls-bind-client-id",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --tls-client-ca and token auth, a call's certificate must name its token's client id "
        "(subject CN or a subjectAltName entry), else UNAUTHENTICATED (default: on)",
    )
    sec.add_argument("--insecure", action="store_true", default=None, help="serve plaintext (local tests only)")
    sec.add_argument(
        "--auth",
        choices=("token", "open"),
        help="token: every RPC but health needs a device token from `enroll` (default); "
        "open: no authentication (local simulations)",
    )
    sec.add_argument(
        "--max-streams-per-client",
        metavar="N",
        type=int,
        help="downloads/uploads a client may run at once; 0 disables (default 4)",
    )
    sec.add_argument(
        "--unauthenticated-calls",
        metavar="N",
        type=int,
        help="Join calls without a token in metadata served at once; more are refused before their "
        "request is read (default 2)",
    )
    sec.add_argument(
        "--max-examples",
        metavar="N",
        type=int,
        help="most examples (FedAvg weight) one update may claim; a device is also held to the number "
        "it announced at Join (default 1000000000)",
    )
    sec.add_argument(
        "--upload-min-rate",
        dest="upload_min_rate_bytes_s",
        metavar="BYTES_S",
        type=float,
        help="an upload slower than this over any --upload-rate-window loses its slot (default 65536)",
    )
    sec.add_argument(
        "--upload-rate-window",
        dest="upload_rate_window_s",
        metavar="S",
        type=float,
        help="the window an upload's rate is measured over (default 10)",
    )
    sec.add_argument(
        "--submissions-per-minute",
        metavar="N",
        type=float,
        help="per-client rate of updates and evaluations; 0 disables (default 60)",
    )
    serve.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (default: off)",
    )
    web = serve.add_argument_group("web port (browsers; needs the fedort[web] extra)")
    web.add_argument(
        "--web-address",
        metavar="HOST:PORT",
        help="also serve the service over Connect and gRPC-Web on HTTP, for browsers (TLS as the gRPC port; "
        "default: off)",
    )
    web.add_argument(
        "--web-cors-origin",
        dest="web_cors_origins",
        metavar="ORIGIN",
        action="append",
        help="an origin besides the page's own that browsers may call the web port from, e.g. "
        "https://lab.example:8443 (repeatable; '*': any; default: same origin only)",
    )
    web.add_argument(
        "--web-page",
        metavar="DIR",
        type=Path,
        help="folder of static files served at / of the web port (default: the packaged page if built)",
    )
    serve.add_argument(
        "--strategy",
        metavar="SPEC",
        help="aggregation: fedavg | clip:NORM | median | trimmed-mean:BETA | krum:F | multi-krum:F:M (default fedavg)",
    )
    serve.add_argument(
        "--codec",
        dest="codecs",
        metavar="SPEC[,SPEC...]",
        help="update codecs devices may use, e.g. raw,int8,topk (a family admits every parameter; raw "
        "is always allowed; default: every registered codec); announced at Join",
    )
    serve.add_argument(
        "--server-optimizer",
        metavar="SPEC",
        help="server update after aggregation: fedavg | fedavgm | fedadagrad | fedadam | fedyogi, "
        "options as NAME:KEY=VALUE,... e.g. fedadam:lr=0.01,beta1=0.9,beta2=0.99,tau=1e-3 "
        "(default fedavg)",
    )
    add_async_flags(serve)
    add_privacy_flags(serve)
    serve.set_defaults(func=serve_command)

    status = sub.add_parser("status", help="print rounds, clients and the latest model of a state dir")
    status.add_argument("--state-dir", type=Path, required=True, metavar="DIR", help="the coordinator's state dir")
    status.add_argument("--json", action="store_true", help="print the status as one JSON object (for scripts)")
    status.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=2.0,
        metavar="SECONDS",
        help="print the status again every SECONDS (default 2) until interrupted; with --json, "
        "one JSON object per line",
    )
    status.set_defaults(func=status_command)

    enroll = sub.add_parser("enroll", help="enroll a device: print its token once (only a hash is stored)")
    enroll.add_argument("name", metavar="NAME", help="device name; also its client id when it is a valid id")
    enroll.add_argument("--state-dir", type=Path, required=True, metavar="DIR", help="the coordinator's state dir")
    enroll.add_argument(
        "--client-id", metavar="ID", help="client id of the device (default: NAME if valid, else generated)"
    )
    enroll.add_argument(
        "--out",
        metavar="FILE",
        type=Path,
        help="write the token to FILE (created with mode 0600, never overwritten) instead of stdout",
    )
    enroll.set_defaults(func=enroll_command)

    revoke = sub.add_parser("revoke", help="revoke a device's token (effective on its next call)")
    revoke.add_argument(
        "device", metavar="NAME|ID", help="client id, or device name (revokes every device of that name)"
    )
    revoke.add_argument("--state-dir", type=Path, required=True, metavar="DIR", help="the coordinator's state dir")
    revoke.set_defaults(func=revoke_command)

    devices = sub.add_parser("devices", help="list enrolled devices (never their tokens)")
    devices.add_argument("--state-dir", type=Path, required=True, metavar="DIR", help="the coordinator's state dir")
    devices.set_defaults(func=devices_command)


_FLAG_KEYS = (
    "artifacts",
    "state_dir",
    "address",
    "port_file",
    "rounds",
    "min_clients",
    "min_available_clients",
    "fraction",
    "round_timeout_s",
    "max_round_attempts",
    "local_epochs",
    "batch_size",
    "lr",
    "prox_mu",
    "seed",
    "eval_data",
    "fraction_evaluate",
    "client_timeout_s",
    "done_grace_s",
    "keep_spool",
    "strategy",
    "server_optimizer",
    "mode",
    "buffer_size",
    "max_staleness",
    "staleness_weight",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "tls_bind_client_id",
    "insecure",
    "auth",
    "max_streams_per_client",
    "submissions_per_minute",
    "unauthenticated_calls",
    "max_examples",
    "upload_min_rate_bytes_s",
    "upload_rate_window_s",
    "metrics_address",
    "codecs",
    "local_vector_dir",
    "export_external_bytes",
    "web_address",
    "web_cors_origins",
    "web_page",
)


def config_from_args(args: argparse.Namespace) -> CoordinatorConfig:
    """Defaults < --config TOML < flags."""
    return CoordinatorConfig.load(args.config, **{k: getattr(args, k) for k in _FLAG_KEYS + PRIVACY_KEYS})


def serve_command(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    config.check_transport_security()  # before anything else: say at once that TLS or --insecure is needed
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
        await coordinator.until_devices_told(stop)  # so every device learns the outcome and exits at once
        if outcome.state is RoundState.FAILED:
            log.error("run failed: %s", outcome.message)
            return 1
        log.info(
            "run done: %d rounds committed; latest model in %s",
            outcome.rounds_completed,
            config.state_dir / "models" / "latest.json",
        )
        return 0
    finally:
        await coordinator.stop(grace=5.0)
        for sig in handled:
            loop.remove_signal_handler(sig)


def enroll_command(args: argparse.Namespace) -> int:
    import os

    from fedort.common.errors import ConfigError
    from fedort.coordinator.rpc.devices import DeviceStore

    if args.out is not None and (args.out.exists() or args.out.is_symlink()):
        raise ConfigError(f"--out {args.out} exists; a token file is never overwritten (remove it or choose another)")
    device, token = DeviceStore(args.state_dir).enroll(args.name, args.client_id)
    if args.out is None:
        print(token)
        where = "this token is shown only once"
    else:
        # O_EXCL + 0600 at creation: the token is never readable by others, not even for an instant
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        where = f"its token is in {args.out} (mode 0600) and nowhere else"
    print(
        f"enrolled {device.name} as client {device.client_id}; {where}: give it to the device "
        "(fedort edge run --token-file FILE, or $FEDORT_TOKEN)",
        file=sys.stderr,
    )
    return 0


def revoke_command(args: argparse.Namespace) -> int:
    from fedort.coordinator.rpc.devices import DeviceStore

    for d in DeviceStore(args.state_dir).revoke(args.device):
        print(f"revoked {d.client_id} ({d.name})")
    return 0


def devices_command(args: argparse.Namespace) -> int:
    from fedort.coordinator.rpc.devices import DeviceStore

    print(f"{'client id':<24} {'name':<24} {'enrolled (UTC)':<20} status")
    for d in DeviceStore(args.state_dir).devices():
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(d.enrolled_ms / 1000))
        status = (
            "revoked " + time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(d.revoked_ms / 1000))
            if d.revoked_ms is not None
            else "active"
        )  # (= d.revoked)
        print(f"{d.client_id:<24} {d.name:<24} {when:<20} {status}")
    return 0


def _json_value(value: object) -> object:
    """Status fields JSON lacks a type for: state enums by their wire name, mappings as objects."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def status_command(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    if args.watch is not None and not args.watch > 0:
        from fedort.common.errors import ConfigError

        raise ConfigError(f"--watch needs a positive number of seconds, got {args.watch}")
    clear = args.watch is not None and not args.json and sys.stdout.isatty()
    while True:
        snapshot = offline_status(args.state_dir)
        if args.json:
            record = {**dataclasses.asdict(snapshot), "storage_full": snapshot.storage_full}
            print(json.dumps(record, sort_keys=True, default=_json_value), flush=True)
        else:
            print(
                ("\033[H\033[2J" if clear else "")
                + format_status(snapshot)
                + ("" if clear or args.watch is None else "\n"),
                flush=True,
            )
        if args.watch is None:
            return 0
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0
