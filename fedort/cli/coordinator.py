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

from fedort.common.round_state import RoundState
from fedort.common.settings.options import add_flags, deprecated_flag
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.server import Coordinator
from fedort.coordinator.status import format_status, offline_status

log = logging.getLogger("coordinator")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("coordinator", help="run or inspect a federated coordinator")
    sub = parser.add_subparsers(dest="coordinator_command", metavar="ACTION", required=True)

    serve = sub.add_parser(
        "serve",
        help="serve a federated run over gRPC from a durable state dir",
        description="Serve a federated run. Every setting has one flag, --KEY with '_' as '-' (booleans also "
        "--no-KEY), grouped below by the [coordinator.<section>] table that holds its key in a --config file.",
    )
    add_serve_flags(serve)
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


# renamed flags: accepted for one release, with a warning naming the new flag
DEPRECATED_FLAGS = {
    "--round-timeout": "round_timeout_s",
    "--client-timeout": "client_timeout_s",
    "--done-grace": "done_grace_s",
    "--codec": "codecs",
    "--upload-min-rate": "upload_min_rate_bytes_s",
    "--upload-rate-window": "upload_rate_window_s",
    "--web-cors-origin": "web_cors_origins",
}


def add_serve_flags(serve: argparse.ArgumentParser) -> None:
    """`--config`, then one flag per CoordinatorConfig key (the options table), a group per section."""
    from fedort.coordinator.settings import SECTIONS, TITLES

    serve.add_argument(
        "--config",
        metavar="FILE.toml",
        type=Path,
        help="TOML file ([coordinator] table, one [coordinator.<section>] table per group below); flags "
        "override it. Relative paths in the file resolve against the file's folder (in flags against the "
        "current directory)",
    )
    table = CoordinatorConfig.options()
    add_flags(serve, [o for o in table if not o.section])
    groups = {name: serve.add_argument_group(f"[{name}] {TITLES[name]}") for name in SECTIONS}
    for name in SECTIONS:
        add_flags(groups[name], [o for o in table if o.section == name])
    section_of = {o.key: o.section for o in table}
    for old, key in DEPRECATED_FLAGS.items():
        kind = next(o.kind for o in table if o.key == key)
        deprecated_flag(
            groups[section_of[key]], old, key, type=float if kind is float else str, append=key == "web_cors_origins"
        )


def config_from_args(args: argparse.Namespace) -> CoordinatorConfig:
    """Defaults < --config TOML < flags."""
    keys = [o.key for o in CoordinatorConfig.options() if o.flag]
    return CoordinatorConfig.load(args.config, **{k: getattr(args, k) for k in keys})


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
