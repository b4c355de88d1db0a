"""The asynchronous-mode (FedBuff) flags shared by `fedort coordinator serve` and `fedort simulate`.

Made from the fedbuff section (`fedort.coordinator.fedbuff.config`), which loads neither the
coordinator nor gRPC, so `fedort simulate` parses its flags without them.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from fedort.common.settings.options import add_flags, options
from fedort.coordinator.fedbuff.config import FedBuffSettings

FEDBUFF_KEYS = tuple(f.name for f in fields(FedBuffSettings))


def add_async_flags(parser: argparse.ArgumentParser) -> None:
    """--mode and FedBuff's settings, one flag per FedBuffSettings key, in a group of their own."""
    add_flags(parser.add_argument_group("asynchronous mode (FedBuff)"), options(FedBuffSettings, "fedbuff"))
