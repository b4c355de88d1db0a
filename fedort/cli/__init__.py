"""`fedort`: the command-line entry point; one module per command in this package.

Subcommands are plug-ins (entry points in the `fedort.commands` group, see pyproject.toml) and
only the chosen one is imported, so `fedort edge run` on a device loads no coordinator code and
a device install without the coordinator package simply lacks that command.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator

from fedort.common.errors import FedortError

GROUP = "fedort.commands"


def _commands() -> dict:
    from importlib.metadata import entry_points  # here: a spawned worker re-imports this module, needs none

    return {ep.name: ep for ep in entry_points(group=GROUP)}


class _Version(argparse.Action):
    """argparse's version action, reading `fedort.__version__` only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from fedort import __version__

        print(f"fedort {__version__}")  # stdout, as argparse's own version action
        parser.exit()


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedort",
        description="Federated learning for models that train on the device with ONNX Runtime.",
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, help="logging verbosity (default: INFO)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands = _commands()
    chosen = next((a for a in argv if not a.startswith("-") and a in commands), None)
    for name in [chosen] if chosen else sorted(commands):
        try:
            commands[name].load()(sub)
        except ImportError as e:  # e.g. the coordinator package is not installed on a device
            sub.add_parser(name, help=f"(unavailable here: {e})")
    _accept_log_level_anywhere(parser)
    return parser


LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


def _accept_log_level_anywhere(parser: argparse.ArgumentParser) -> None:
    """Give every (sub)command `--log-level` too, so `fedort simulate --log-level DEBUG` works as
    `fedort --log-level DEBUG simulate` does; unset there, it leaves the top-level value alone."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                if "--log-level" not in child._option_string_actions:
                    child.add_argument(
                        "--log-level",
                        choices=LOG_LEVELS,
                        default=argparse.SUPPRESS,
                        help="logging verbosity (default: INFO)",
                    )
                _accept_log_level_anywhere(child)


_leave_now = False


def leave_without_teardown() -> None:
    """Called by a command once every file it wrote is closed and fsynced: the `fedort` process then
    ends with `os._exit` instead of the interpreter's teardown (module and native-library finalisers
    of ONNX Runtime, gRPC, matplotlib: seconds after a simulation, doing nothing anyone needs)."""
    global _leave_now
    _leave_now = True


def console_main() -> None:
    """The `fedort` command (`python -m fedort`): `main()`, then exit (without teardown if the command allowed it)."""
    rc = main()
    if _leave_now:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)


def main(argv: list[str] | None = None) -> int:
    # gRPC core writes its own INFO/WARNING lines straight to stderr (fork handlers under Ray, ...): keep its
    # errors only, unless the user asked for more; set before any module imports grpc
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    with _logging_to_stderr(args.log_level):
        try:
            return int(func(args) or 0)
        except FedortError as e:
            print(f"fedort: error: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("fedort: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:
            return _stdout_closed()


def _stdout_closed() -> int:
    """The reader of our stdout went away (`fedort coordinator status | head`): stop quietly, as a
    command killed by SIGPIPE does (exit 141), with stdout pointed at /dev/null so the interpreter's
    final flush raises nothing either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no real file (an embedding app's replacement)
        pass
    finally:
        os.close(devnull)
    return 141


@contextlib.contextmanager
def _logging_to_stderr(level: str) -> Iterator[None]:
    """Log to stderr for the command's duration, then restore the root logger as it was.

    Replaces existing root handlers (importing onnxruntime may have added one, which would make
    `basicConfig` a no-op), and restores them so an in-process call (tests, an embedding app)
    leaves no handler bound to a stream that may be closed later.
    """
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    root.handlers = [handler]
    root.setLevel(level)
    try:
        yield
    finally:
        root.handlers, _ = saved
        root.setLevel(saved[1])


if __name__ == "__main__":
    sys.exit(main())
