"""What reaches the aggregation pipeline: one durable update, still in its wire encoding.

An update is handed to the round's aggregator only after it is durable (spool file fsynced and
its SQLite row committed), so a restart replays exactly the updates the aggregator saw.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Fold in blocks that stay in cache: the scaled copy of a block never goes to main memory, so
# one fold streams each update once and the accumulator once, like a bare `acc += v`.
# 2**16 elements (256/512 KB scratch) fits L2 and keeps the per-block Python calls a few % of the time
# (neighbouring powers of two perform about the same).
BLOCK = 1 << 16

Blocks = Iterator[tuple[int, np.ndarray]]  # (start, values[start:start + len(block)]) in order


@dataclass(frozen=True)
class Update:
    """One accepted update: who sent it, its weight, and its payload in wire codec `codec`.

    `payload` is the encoded bytes in memory (a 1-D numpy array of any dtype, e.g. the received
    float32 vector for `raw`) or None, in which case the decoder reads the spool file `path`.
    """

    client_id: str
    num_examples: int
    codec: str
    path: Path
    payload: np.ndarray | None = None

    def encoded(self) -> np.ndarray:
        """The payload bytes as a uint8 array: in memory if held, else memory-mapped from the spool file."""
        if self.payload is not None:
            return np.ascontiguousarray(self.payload).view(np.uint8).reshape(-1)
        return np.memmap(self.path, dtype=np.uint8, mode="r")


def as_blocks(vector: np.ndarray, block: int = BLOCK) -> Blocks:
    """A full vector as (start, block) pairs: views, no copies."""
    for start in range(0, len(vector), block):
        yield start, vector[start : start + block]
