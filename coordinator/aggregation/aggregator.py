"""The per-round aggregator: durable updates in, the next global vector out, through the configured chain.

    agg = strategy.new_round(global_vector)     # at round open (or on restart, before replay)
    agg.add(update)                             # each durable update, in one worker thread
    result = agg.result()                       # at round close: RoundResult(vector, combined, ...)

`add` runs the decode stage, then transforms -> combiner.fold for a streaming combiner:

    delta codec, combiner.folds_deltas, no transforms:  fold_delta(pieces of dᵢ)   (g added once at combine)
    otherwise:                                           fold(blocks of xᵢ = g + dᵢ, or of xᵢ itself)
    with transforms:                                     xᵢ decoded whole (one P-sized array at a time)

Folded early (`fold_early`, a co-located raw update folded while its file is checked, before it is
durable): `add(update, early=token)` then only records it. If an early fold failed part-way or was
never followed by its `add` (digest mismatch, non-finite values, a failed group commit, a closed
round), the sum holds values nothing acknowledged: the aggregator is `stale` and `rebuild(counted)`
refolds, from their durable copies, exactly the updates that were added.

A spool combiner reads every update at `result` from the spool, as dense float32 files: a raw
update's spool file is that already; any other codec is decoded once, in `add`, into a decoded
spool file beside it (`<spool file>.f32`, derived data: not fsynced, rebuilt by restart replay).
`result` applies the server update.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedort.common.errors import VectorError
from fedort.coordinator.aggregation.decode import Decoder, decoder_for, reconstructed_blocks, values
from fedort.coordinator.aggregation.spool import SpooledUpdate
from fedort.coordinator.aggregation.update import Blocks, Update, as_blocks

if TYPE_CHECKING:
    from fedort.coordinator.aggregation.strategies import Strategy

DECODED_SUFFIX = ".f32"


@dataclass(frozen=True)
class RoundResult:
    """What a round's aggregation produced: the next global vector and how it came about."""

    vector: np.ndarray  # g', float32: what the round commits
    combined: np.ndarray  # c, the combiner's output (g' = c for the identity server update)
    updates: int
    examples: int


class RoundAggregator:
    """One round's aggregation over `strategy`'s chain, from the round's global vector `global_vector`."""

    def __init__(self, strategy: Strategy, global_vector: np.ndarray) -> None:
        self.strategy = strategy
        self.global_vector = global_vector
        self.length = len(global_vector)
        self._spooled: list[SpooledUpdate] = []
        self._examples = 0
        self._lock = threading.Lock()
        self._early: list[Hashable] = []  # tokens of early folds not yet added
        self._spoiled = False  # an early fold failed part-way
        strategy.combiner.reset(self.length)

    @property
    def folds_early(self) -> bool:
        """Whether `fold_early` may be used: a streaming combiner that folds float32 blocks, no transforms."""
        c = self.strategy.combiner
        return c.streaming and not c.folds_words and not self.strategy.transforms

    def fold_early(self, token: Hashable, blocks: Blocks, weight: float) -> None:
        """Fold an update's values before it is durable (same thread rules as `add`); `add(update, early=token)`
        once it counts. If `blocks` raises, the sum is spoiled until `rebuild` (see the module docstring)."""
        try:
            self.strategy.combiner.fold(blocks, weight)
        except BaseException:
            self._spoiled = True
            raise
        self._early.append(token)

    @property
    def stale(self) -> bool:
        """The sum holds values of an update that was never added: `rebuild` before `result`."""
        return self._spoiled or bool(self._early)

    def rebuild(self, updates: Iterable[Update]) -> None:
        """Refold `updates` (every update added so far, from their durable copies) into a fresh sum."""
        self.strategy.combiner.reset(self.length)
        for u in updates:
            self._fold(u)
        self._early, self._spoiled = [], False

    def add(self, update: Update, early: Hashable | None = None) -> None:
        """Count one durable update, folding it in unless `fold_early(early, ...)` already did (call from one
        thread at a time: streaming combiners are not thread-safe)."""
        if early is not None and early in self._early:
            self._early.remove(early)
            path = update.path
        else:
            path = self._fold(update)
        with self._lock:
            self._spooled.append(SpooledUpdate(update.client_id, path, update.num_examples))
            self._examples += update.num_examples

    def _fold(self, update: Update) -> Path:
        """Fold one update into the combiner; the spool file a spool combiner reads it from."""
        combiner = self.strategy.combiner
        path = update.path
        if combiner.folds_words:  # reads the payload itself
            combiner.fold_update(update, self.length)
            return path
        decoder = decoder_for(update.codec)
        payload = update.encoded()
        if combiner.streaming:
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
        return path

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
