"""The per-round aggregator: durable updates in, the next global vector out, through the configured chain.

    agg = strategy.new_round(global_vector)     # at round open (or on restart, before replay)
    agg.add(update)                             # each durable update, in one worker thread
    result = agg.result()                       # at round close: RoundResult(vector, combined, ...)

`add` runs decode -> transforms -> combiner.fold for a streaming combiner (without transforms the
decoder streams block by block straight into the fold), or only notes the spool file for a spool
combiner, which reads every file at `result`. `result` applies the server update.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fedort.coordinator.aggregation.decode import decoder_for
from fedort.coordinator.aggregation.spool import SpooledUpdate
from fedort.coordinator.aggregation.update import Update, as_blocks
from fedort.protos.errors import VectorError

if TYPE_CHECKING:
    from fedort.coordinator.aggregation.strategies import Strategy


@dataclass(frozen=True)
class RoundResult:
    """What a round's aggregation produced: the next global vector and how it came about."""

    vector: np.ndarray        # g', float32: what the round commits
    combined: np.ndarray      # c, the combiner's output (g' = c for the identity server update)
    updates: int
    examples: int


class RoundAggregator:
    """One round's aggregation over `strategy`'s chain, from the round's global vector `global_vector`."""

    def __init__(self, strategy: "Strategy", global_vector: np.ndarray) -> None:
        self.strategy = strategy
        self.global_vector = global_vector
        self.length = len(global_vector)
        self._spooled: list[SpooledUpdate] = []
        self._examples = 0
        self._lock = threading.Lock()
        strategy.combiner.reset(self.length)

    def add(self, update: Update) -> None:
        """Fold one durable update in (call from one thread at a time: streaming combiners are not thread-safe)."""
        combiner = self.strategy.combiner
        if combiner.streaming:
            if self.strategy.transforms:
                values = decoder_for(update.codec).decode(update.encoded(), self.length)
                for t in self.strategy.transforms:
                    values = t.apply(values, self.global_vector, update)
                combiner.fold(as_blocks(values), update.num_examples)
            else:
                combiner.fold_update(update, self.length)
        with self._lock:
            self._spooled.append(SpooledUpdate(update.client_id, update.path, update.num_examples))
            self._examples += update.num_examples

    def result(self) -> RoundResult:
        """The next global vector: combine (spool files sorted by client id), then the server update."""
        with self._lock:
            spooled = sorted(self._spooled, key=lambda u: u.client_id)
        if not spooled:
            raise VectorError("no updates were added; the round has nothing to aggregate")
        combined = self.strategy.combiner.combine(spooled, self.global_vector)
        vector = self.strategy.server_update.apply(self.global_vector, combined)
        return RoundResult(vector, combined, len(spooled), self._examples)
