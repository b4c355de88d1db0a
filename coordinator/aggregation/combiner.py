"""Stage 3, the combiner: the round's (transformed) updates -> one float32 vector c.

Two kinds, told apart by `streaming`:

- streaming (`weighted_sum.WeightedMean`; later a secure sum mod 2^b): `fold(blocks, weight)` is
  called once per update as it arrives, from one worker thread, and `combine` returns the result
  at round close. Memory O(P) whatever the number of clients.
- spool (`median.Median`, `trimmed_mean.TrimmedMean`, `krum.Krum`): `fold` is never called;
  `combine` gets every update of the round as spool files (`spool.SpooledUpdate`, sorted by client
  id) and reads them memory-mapped in column blocks. Memory O(P + block).

A combiner object lives for the whole run and is `reset` at each round's start, so it may keep
its buffers (the float64 accumulator is paged in once, not on the first fold of every round).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from fedort.coordinator.aggregation.spool import SpooledUpdate
from fedort.coordinator.aggregation.update import Update
from fedort.protos.update_codecs import Piece


class Combiner:
    name = "combiner"
    streaming = True
    folds_deltas = False  # streaming: `fold_delta` takes a delta codec's pieces (the global added once at combine)
    folds_words = False  # streaming: `fold_update` takes the durable update itself (its payload is not floats)

    def reset(self, length: int) -> None:
        """Forget the previous round (streaming combiners: zero the running state)."""

    def fold(self, blocks: Iterable[tuple[int, np.ndarray]], weight: float) -> None:
        """Streaming: add one update, given as its (start, float32 block) pairs in order, with `weight`."""
        raise NotImplementedError(f"combiner {self.name} reads the spool at round close; it folds nothing")

    def fold_delta(self, pieces: Iterable[Piece], weight: float) -> None:
        """Streaming, `folds_deltas`: add one update given as decoded pieces of d = x − g, with `weight`."""
        raise NotImplementedError(f"combiner {self.name} folds whole updates only")

    def fold_update(self, update: Update, length: int) -> None:
        """`folds_words`: fold one durable update from its raw payload words (the secure sum: whose masked
        input, summed mod 2^b; nothing is decoded to floats)."""
        raise NotImplementedError(f"combiner {self.name} folds decoded values only")

    def combine(self, spooled: Sequence[SpooledUpdate], global_vector: np.ndarray) -> np.ndarray:
        """The round's combined float32 vector (spool combiners read `spooled`; streaming ones ignore it)."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.name
