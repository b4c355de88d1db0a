"""Bounded-memory reading of a round's spool: the accepted update files, memory-mapped, in column blocks.

Combiners that need every update of the round at once (median, trimmed mean, Krum) get the
round's spooled files at close. They are read through `np.memmap` in column blocks of at most
`BLOCK_BYTES` for all clients together, so memory stays O(P + BLOCK_BYTES) however many clients
reported: block b holds vᵢ[s_b : s_b + c] for every client i, with c·n·4 ≤ BLOCK_BYTES.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedort.common.errors import VectorError

# One block holds the same column range of every update: clients × columns × 4 bytes ≤ this.
# 8 MiB keeps the block (and the sort's copy of it) in the last-level cache's neighbourhood and
# the per-block Python overhead negligible (≥ 100 k columns for 20 clients).
BLOCK_BYTES = 8 << 20


@dataclass(frozen=True)
class SpooledUpdate:
    """One accepted update as the spool holds it: raw little-endian float32, `num_examples` weight."""

    client_id: str
    path: Path
    num_examples: int


def open_updates(updates: Sequence[SpooledUpdate], length: int) -> list[np.ndarray]:
    """Read-only memory maps of the spooled updates (nothing is read until a block is sliced)."""
    if not updates:
        raise VectorError("no updates to aggregate")
    maps: list[np.ndarray] = []
    for u in updates:
        size = u.path.stat().st_size
        if size != 4 * length:
            raise VectorError(f"spooled update {u.path} holds {size} bytes, expected {4 * length} (float32 × {length})")
        maps.append(np.memmap(u.path, dtype="<f4", mode="r", shape=(length,)))
    return maps


def block_columns(rows: int, block_bytes: int = BLOCK_BYTES) -> int:
    """Columns per block so that `rows` float32 rows of it fit in `block_bytes`."""
    return max(1024, block_bytes // (4 * max(1, rows)))


def column_blocks(vectors: Sequence[np.ndarray], block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[int, np.ndarray]]:
    """(start, block) pairs: block[i] is vectors[i][start:start+b] as one float32 array.

    The block buffer is reused between iterations: use (or copy) it before asking for the next.
    """
    rows, length = len(vectors), len(vectors[0])
    cols = min(length, block_columns(rows, block_bytes))
    buf = np.empty((rows, cols), dtype=np.float32)
    for start in range(0, length, cols):
        stop = min(length, start + cols)
        block = buf[:, : stop - start]
        for i, v in enumerate(vectors):
            block[i] = v[start:stop]
        yield start, block
