"""Aggregation strategies: FedAvg (the default) and Byzantine-robust alternatives.

    strategy = parse_strategy("trimmed-mean:0.2")

| spec | strategy | streaming |
| --- | --- | --- |
| `fedavg` | example-weighted mean (`fedavg.FedAvg`) | yes |
| `clip:NORM` | FedAvg of deltas clipped to L2 norm ≤ NORM (`clipping.ClippedFedAvg`) | yes |
| `median` | coordinate-wise median (`median.Median`) | no: reads the spool |
| `trimmed-mean:BETA` | coordinate-wise mean after trimming ⌊BETA·n⌋ per side, 0 ≤ BETA < 0.5 | no |
| `krum:F` | the one update closest to its n − F − 2 neighbours (`krum.Krum`) | no |
| `multi-krum:F:M` | example-weighted mean of the M best Krum-scored updates | no |

Strategies that are not streaming get the round's spooled update files at round close and read
them memory-mapped in column blocks (see `base`), so memory stays bounded.
"""

from __future__ import annotations

import math

from fedort.coordinator.strategies.base import SpooledUpdate, Strategy
from fedort.coordinator.strategies.clipping import ClippedFedAvg
from fedort.coordinator.strategies.fedavg import FedAvg
from fedort.coordinator.strategies.krum import Krum
from fedort.coordinator.strategies.median import Median
from fedort.coordinator.strategies.trimmed_mean import TrimmedMean
from fedort.protos.errors import ConfigError

SPECS = "fedavg | clip:NORM | median | trimmed-mean:BETA | krum:F | multi-krum:F:M"


def _number(text: str, what: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"strategy {spec!r}: {what} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"strategy {spec!r}: {what} must be finite, got {text!r}")
    return value


def _count(text: str, what: str, spec: str, minimum: int) -> int:
    if not text.strip().isdigit() or int(text) < minimum:
        raise ConfigError(f"strategy {spec!r}: {what} must be an integer >= {minimum}, got {text!r}")
    return int(text)


def parse_strategy(spec: str) -> Strategy:
    """The strategy a spec names (see the table above); ConfigError says what was expected."""
    if not isinstance(spec, str):
        raise ConfigError(f"strategy must be a string ({SPECS}), got {spec!r}")
    name, *args = spec.strip().lower().split(":")
    arity = {"fedavg": 0, "median": 0, "clip": 1, "trimmed-mean": 1, "krum": 1, "multi-krum": 2}
    if name not in arity:
        raise ConfigError(f"unknown strategy {spec!r}; expected one of {SPECS}")
    if len(args) != arity[name]:
        usage = next(s.strip() for s in SPECS.split("|") if s.strip().split(":")[0] == name)
        raise ConfigError(f"strategy {spec!r} takes {arity[name]} parameter(s): expected {usage!r}")
    if name == "fedavg":
        return FedAvg()
    if name == "median":
        return Median()
    if name == "clip":
        norm = _number(args[0], "the clipping norm NORM", spec)
        if norm <= 0:
            raise ConfigError(f"strategy {spec!r}: the clipping norm NORM must be > 0, got {args[0]!r}")
        return ClippedFedAvg(norm)
    if name == "trimmed-mean":
        beta = _number(args[0], "the trimmed fraction BETA", spec)
        if not 0 <= beta < 0.5:
            raise ConfigError(f"strategy {spec!r}: the trimmed fraction BETA (per side) must be in [0, 0.5), "
                              f"got {args[0]!r}")
        return TrimmedMean(beta)
    f = _count(args[0], "the assumed Byzantine count F", spec, 0)
    m = _count(args[1], "the selected count M", spec, 1) if name == "multi-krum" else 1
    return Krum(f, m)


__all__ = ["SPECS", "ClippedFedAvg", "FedAvg", "Krum", "Median", "SpooledUpdate", "Strategy", "TrimmedMean",
           "parse_strategy"]
