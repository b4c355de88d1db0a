"""The asynchronous-mode (FedBuff) flags shared by `fedort coordinator serve` and `fedort simulate`.

A module of its own so that `fedort simulate` parses its flags without loading the coordinator
(`fedort.cli.coordinator` imports it, which would delay the simulation's worker processes).
"""

from __future__ import annotations

import argparse


def add_async_flags(parser: argparse.ArgumentParser) -> None:
    """--mode and FedBuff's settings (shared by `coordinator serve` and `simulate`)."""
    parser.add_argument(
        "--mode",
        choices=("sync", "async"),
        help="sync: rounds; async: FedBuff global versions, --rounds of them (default sync)",
    )
    parser.add_argument(
        "--buffer-size", type=int, metavar="K", help="async: updates per new global version (default 10)"
    )
    parser.add_argument(
        "--max-staleness",
        type=int,
        metavar="S",
        help="async: refuse updates trained more than S versions ago (default 10)",
    )
    parser.add_argument(
        "--staleness-weight",
        metavar="SPEC",
        help="async: weight of a stale update: constant | poly:A | hinge:A,B (default poly:0.5)",
    )
