"""A closed round's commit: aggregate, write the next global vector (and server state) durably, record the row.

    aggregate (refused if not finite) ──▶ vector file + server state ──▶ sha256 ──▶ `rounds` row COMMITTED

The commit of a round the next one follows may be deferred into the next round's open (one WAL
fsync for both, `defer`); no task of the next round exists before that transaction, so nothing acts
on an uncommitted round, and a crash in between replays it from its durable updates. A vector small
enough is durable inside its row, and its file is fsynced by the background export instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedort.common.durable import atomic_write, drop_cached
from fedort.common.faults import fault_point
from fedort.coordinator.aggregation import Strategy
from fedort.coordinator.colocated.local_vectors import LocalVectorDir
from fedort.coordinator.engine.recovery import acknowledged_updates, save_server_state
from fedort.coordinator.engine.refused_aggregate import candidate
from fedort.coordinator.engine.training_round import TrainingRound
from fedort.coordinator.state.storage import retry_when_full
from fedort.coordinator.state.store import StateStore
from fedort.protos.vector_stream import vector_digest

log = logging.getLogger("fedort.coordinator.engine.round_engine")

SMALL_VECTOR = 1 << 16  # values: a round result this small is computed on the event loop


@dataclass(frozen=True)
class CommittedVector:
    """The global vector a commit made durable, its sha256 and (when devices check with it) its BLAKE3."""

    vector: np.ndarray
    sha256: bytes
    blake3: bytes | None


async def commit_round(
    r: TrainingRound,
    *,
    store: StateStore,
    strategy: Strategy,
    length: int,
    inline_bytes: int,
    blake3: bool,
    round_metrics: Callable[[], dict[str, float]],
    defer: bool = False,
) -> CommittedVector:
    """Commit round `r.round` (see the module docstring); `inline_bytes`: the largest vector kept in its row;
    `blake3`: compute the vector's BLAKE3 too; `round_metrics`: the privacy figures stored with the round.
    RefusedAggregate (nothing written) if the aggregate is not finite."""
    fault_point("round.before_commit")
    t0 = time.perf_counter()
    if r.aggregator.stale:  # an update folded while checked was not counted (uploads): refold the counted ones
        updates = acknowledged_updates(store, r.round)
        log.warning(
            "round %d: the sum held an update that was not counted; refolding the %d acknowledged updates",
            r.round,
            len(updates),
        )
        await asyncio.to_thread(r.aggregator.rebuild, updates)
    small = length <= SMALL_VECTOR and not strategy.needs_all_updates  # microseconds: no thread hop
    # a vector this small is durable inside the commit's row; its file is fsynced by the export, off the critical path
    inline_sized = 0 < 4 * length <= inline_bytes
    # the new vector file's page cache takes the pages of g_{r-1}'s, freed while the mean is computed
    # (durable.drop_cached; nothing reads g_{r-1} now: deltas read g_r)
    older = None if inline_sized else store.vector_path(r.round - 1)
    dropping = None if older is None else asyncio.ensure_future(asyncio.to_thread(drop_cached, older))
    result = await candidate(r.aggregator, small)  # RefusedAggregate if not finite
    if strategy.needs_all_updates:
        log.info(
            "round %d: %s aggregated %d spooled updates in %.1f ms",
            r.round,
            strategy,
            result.updates,
            1000 * (time.perf_counter() - t0),
        )
    vector = result.vector
    # a large vector's sha256 runs in a thread while the files are written, not on the loop
    hashing = None if small else asyncio.ensure_future(asyncio.to_thread(vector_digest, vector))
    sha = vector_digest(vector) if small else b""
    # devices check the file they read or the stream they receive with BLAKE3: computed beside the sha256
    # (a small vector's: microseconds, in set_global, with no thread hop between the commit and the new global)
    file_digest = (
        None if not blake3 or small else asyncio.ensure_future(asyncio.to_thread(LocalVectorDir.file_digest, vector))
    )
    metrics = {**r.metrics.means(), **strategy.server_update.metrics(), **round_metrics()}

    inline = vector.tobytes() if inline_sized else None
    if dropping is not None:
        await dropping

    def write_files() -> None:
        atomic_write(store.vector_path(r.round + 1), vector, durable=inline is None)
        save_server_state(strategy.server_update, store.layout, r.round + 1)

    async def persist() -> None:  # computed once above (a stateful server update must not step twice)
        nonlocal sha
        await asyncio.to_thread(write_files)
        if hashing is not None:
            sha = await hashing
        store.commit_round(r.round, sha.hex(), len(r.reported), r.examples, metrics, defer, inline)

    await retry_when_full(persist, f"round {r.round} commit")  # disk full: wait for space, not die
    log.info(
        "round %d: committed %d updates over %d examples; metrics %s",
        r.round,
        len(r.reported),
        r.examples,
        {k: round(v, 5) for k, v in metrics.items()},
    )
    store.layout.server_state(r.round).unlink(missing_ok=True)  # superseded by the next round's
    return CommittedVector(vector, sha, None if file_digest is None else await file_digest)
