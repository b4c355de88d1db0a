"""The per-round aggregator: durable updates in, the next global vector out, through the configured chain.

    agg = strategy.new_round(global_vector)     # at round open (or on restart, before replay)
    agg.add(update)                             # each durable update, in one worker thread
    result = agg.result()                       # at round close: RoundResult(vector, combined, ...)

`add` runs the decode stage, then transforms -> combiner.fold for a streaming combiner:

    delta codec, combiner.folds_deltas, no transforms:  fold_delta(pieces of dᵢ)   (g added once at combine)
    otherwise:                                           fold(blocks of xᵢ = g + dᵢ, or of xᵢ itself)
    with transforms:                                     xᵢ decoded whole (one P-sized array at a time)

A spool combiner reads every update at `result` from the spool, as dense float32 files: a raw
update's spool file is that already; any other codec is decoded once, in `add`, into a decoded
spool file beside it (`<spool file>.f32`, derived data: not fsynced, rebuilt by restart replay).
`result` applies the server update.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedort.coordinator.aggregation.decode import Decoder, decoder_for, reconstructed_blocks, values
from fedort.coordinator.aggregation.spool import SpooledUpdate
from fedort.coordinator.aggregation.update import Update, as_blocks
from fedort.protos.errors import VectorError

if TYPE_CHECKING:
    from fedort.coordinator.aggregation.strategies import Strategy

DECODED_SUFFIX = ".f32"


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
        decoder = decoder_for(update.codec)
        payload = update.encoded()
        path = update.path
        if combiner.folds_words:
            combiner.fold_update(update, self.length)
        elif combiner.streaming:
            g, w = self.global_vector, update.num_examples
            if self.strategy.transforms:
                x = values(decoder, payload, g)
                for t in self.strategy.transforms:
                    x = t.apply(x, g, update)
                combiner.fold(as_blocks(x), w)
            elif decoder.delta and combiner.folds_deltas:
                combiner.fold_delta(decoder.pieces(payload, self.length), w)
            else:
                combiner.fold(reconstructed_blocks(decoder, payload, g), w)
        elif not decoder.dense_float32:
            path = self._decoded_spool(decoder, payload, update.path)
        with self._lock:
            self._spooled.append(SpooledUpdate(update.client_id, path, update.num_examples))
            self._examples += update.num_examples

    def _decoded_spool(self, decoder: Decoder, payload: np.ndarray, path: Path) -> Path:
        """Write the update's own float32 values beside its spool file, block by block (O(block) memory)."""
        out = path.with_name(path.name + DECODED_SUFFIX)
        with open(out, "wb") as f:
            for _, block in reconstructed_blocks(decoder, payload, self.global_vector):
                f.write(np.ascontiguousarray(block, dtype="<f4").tobytes())
        return out

    def result(self) -> RoundResult:
        """The next global vector: combine (spool files sorted by client id), then the server update."""
        with self._lock:
            spooled = sorted(self._spooled, key=lambda u: u.client_id)
        if not spooled:
            raise VectorError("no updates were added; the round has nothing to aggregate")
        combined = self.strategy.combiner.combine(spooled, self.global_vector)
        vector = self.strategy.server_update.apply(self.global_vector, combined)
        return RoundResult(vector, combined, len(spooled), self._examples)
