"""Named strategies: the `--strategy` spec strings, each a configured chain of pipeline stages.

    strategy = parse_strategy("trimmed-mean:0.2")
    aggregator = strategy.new_round(global_vector)

| spec | strategy | transforms | combiner | server update |
| --- | --- | --- | --- | --- |
| `fedavg` | `FedAvg`: example-weighted mean | – | `WeightedMean` (streaming) | identity |
| `clip:NORM` | `ClippedFedAvg`: FedAvg of deltas clipped to L2 norm ≤ NORM | `NormClip` | `WeightedMean` | identity |
| `median` | `Median`: coordinate-wise median | – | `MedianCombiner` (spool) | identity |
| `trimmed-mean:BETA` | `TrimmedMean`: trim ⌊BETA·n⌋ per side, 0 ≤ BETA < 0.5 | – | `TrimmedMeanCombiner` (spool) | identity |
| `krum:F` | `Krum`: the update closest to its n − F − 2 neighbours | – | `KrumCombiner` (spool) | identity |
| `multi-krum:F:M` | `Krum`: example-weighted mean of the M best Krum-scored updates | – | `KrumCombiner` | identity |

A new strategy is a `Strategy(name, combiner, transforms, server_update)`; a new spec is one
more branch in `parse_strategy`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedort.common.errors import ConfigError
from fedort.common.settings.specs import spec_count, spec_number, split_spec
from fedort.coordinator.aggregation.aggregator import RoundAggregator
from fedort.coordinator.aggregation.clipping import NormClip
from fedort.coordinator.aggregation.combiner import Combiner
from fedort.coordinator.aggregation.robust.krum import KrumCombiner
from fedort.coordinator.aggregation.robust.median import MedianCombiner
from fedort.coordinator.aggregation.robust.trimmed_mean import TrimmedMeanCombiner
from fedort.coordinator.aggregation.server_update import ServerUpdate
from fedort.coordinator.aggregation.spool import SpooledUpdate
from fedort.coordinator.aggregation.transform import Transform
from fedort.coordinator.aggregation.weighted_sum import WeightedMean

SPECS = "fedavg | clip:NORM | median | trimmed-mean:BETA | krum:F | multi-krum:F:M"


class Strategy:
    """A configured chain: per-update `transforms`, one `combiner`, one `server_update` (decode is by codec).

    One Strategy object serves one run: its combiner keeps buffers and its server update keeps
    state from round to round, so two coordinators must not share one.
    """

    def __init__(
        self,
        name: str,
        combiner: Combiner,
        transforms: Sequence[Transform] = (),
        server_update: ServerUpdate | None = None,
    ) -> None:
        if transforms and not combiner.streaming:
            raise ConfigError(
                f"strategy {name!r}: per-update transforms ({', '.join(map(str, transforms))}) need a "
                f"streaming combiner; {combiner} reads the raw spool"
            )
        self.name = name
        self.combiner = combiner
        self.transforms = tuple(transforms)
        self.server_update = server_update or ServerUpdate()

    @property
    def needs_all_updates(self) -> bool:
        """True when the combiner reads every update from the spool at round close (no running sum)."""
        return not self.combiner.streaming

    def new_round(self, global_vector: np.ndarray) -> RoundAggregator:
        """A fresh aggregator for one round that starts from `global_vector`."""
        return RoundAggregator(self, global_vector)

    def prepare(self, vector: np.ndarray, global_vector: np.ndarray) -> np.ndarray:
        """The vector the combiner folds in place of `vector`: every transform applied in order."""
        for t in self.transforms:
            vector = t.apply(vector, global_vector, None)
        return vector

    def aggregate(self, updates: Sequence[SpooledUpdate], global_vector: np.ndarray) -> np.ndarray:
        """Spool combiners: the combined vector of `updates` (files), as at round close."""
        return self.combiner.combine(updates, global_vector)

    def __str__(self) -> str:
        return self.name


class FedAvg(Strategy):
    """Σ nᵢ·vᵢ / Σ nᵢ, streaming: memory O(P) whatever the number of clients."""

    def __init__(self) -> None:
        super().__init__("fedavg", WeightedMean())


class ClippedFedAvg(Strategy):
    """FedAvg of the updates after clipping each delta to L2 norm ≤ `max_norm`."""

    def __init__(self, max_norm: float) -> None:
        clip = NormClip(max_norm)
        self.max_norm = clip.max_norm
        super().__init__(clip.name, WeightedMean(), [clip])


class Median(Strategy):
    """Coordinate-wise median of the round's updates."""

    def __init__(self) -> None:
        super().__init__("median", MedianCombiner())


class TrimmedMean(Strategy):
    """Coordinate-wise β-trimmed mean of the round's updates."""

    def __init__(self, beta: float) -> None:
        combiner = TrimmedMeanCombiner(beta)
        self.beta = combiner.beta
        super().__init__(combiner.name, combiner)


class Krum(Strategy):
    """Multi-Krum with `f` assumed Byzantine clients and `m` selected updates (m = 1: Krum)."""

    def __init__(self, f: int, m: int = 1) -> None:
        combiner = KrumCombiner(f, m)
        self.f, self.m = combiner.f, combiner.m
        super().__init__(combiner.name, combiner)


def parse_strategy(spec: str) -> Strategy:
    """The strategy a spec names (see the table above); ConfigError says what was expected."""
    arity = {"fedavg": 0, "median": 0, "clip": 1, "trimmed-mean": 1, "krum": 1, "multi-krum": 2}
    name, args = split_spec(spec, "strategy", SPECS, arity)
    spec = str(spec)
    if name == "fedavg":
        return FedAvg()
    if name == "median":
        return Median()
    if name == "clip":
        norm = spec_number(args[0], "the clipping norm NORM", spec, "strategy")
        if norm <= 0:
            raise ConfigError(f"strategy {spec!r}: the clipping norm NORM must be > 0, got {args[0]!r}")
        return ClippedFedAvg(norm)
    if name == "trimmed-mean":
        beta = spec_number(args[0], "the trimmed fraction BETA", spec, "strategy")
        if not 0 <= beta < 0.5:
            raise ConfigError(
                f"strategy {spec!r}: the trimmed fraction BETA (per side) must be in [0, 0.5), got {args[0]!r}"
            )
        return TrimmedMean(beta)
    f = spec_count(args[0], "the assumed Byzantine count F", spec, "strategy", 0)
    m = spec_count(args[1], "the selected count M", spec, "strategy", 1) if name == "multi-krum" else 1
    return Krum(f, m)
