"""Restart replay: rebuild the round engine's memory from the state directory before serving.

1. Round 1's global vector is written (once) from the checkpoint.
2. Committed rounds whose export a crash interrupted are exported again; their spools dropped
   (a small committed vector's file is first rewritten from the bytes its row holds).
   So are exported rounds whose model.onnx does not match its model.json (`integrity.export_problem`).
3. The global vector of the next round is checked against the sha256 its commit recorded, and a
   stateful server update gets the state that round starts from.
4. An open (or failed) round is resumed: its acknowledged updates are folded back in exactly once
   from the spool (each checked against its recorded sha256 and decoded with its recorded codec;
   a small update's spool file is first rewritten from the bytes its row holds),
   spool files without a row (written, never acknowledged) are deleted. An open attempt reopens
   with a fresh deadline, minus selected clients that have left; a FAILED round selects afresh
   among the clients still here (its old selection is what failed it).

Any file that fails its recorded hash is a `CorruptStateError` naming it (`coordinator.integrity`).
"""

from __future__ import annotations

import asyncio
import io
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedort.common.durable import atomic_write, drop_partial_writes
from fedort.common.invariants import present
from fedort.common.round_state import RoundState, RunState
from fedort.coordinator.aggregation import Update
from fedort.coordinator.state.integrity import export_problem, read_verified_bytes, read_verified_vector
from fedort.coordinator.state.schema import COMMITTED, EXPORTED, FAILED, OPEN
from fedort.protos.vector_stream import vector_digest

if TYPE_CHECKING:
    from fedort.coordinator.engine.round_engine import RoundEngine

log = logging.getLogger(__name__)


async def recover(engine: RoundEngine) -> bool:
    """Steps 1-4 above; True if an open round was resumed (the engine is then TRAINING)."""
    store = engine.store
    if store.get_meta("initial_vector_sha256") is None:
        vector = engine.exporter.initial_vector()
        await asyncio.to_thread(atomic_write, store.vector_path(1), vector)
        store.set_meta(initial_vector_sha256=vector_digest(vector).hex())
    rows = {r.round: r for r in store.rounds()}
    last = 0
    for r in sorted(rows):
        row = rows[r]
        if row.state in (COMMITTED, EXPORTED):
            last = r
            if row.vector is not None:  # a small vector durable in its row: its unsynced file may be lost or torn
                await asyncio.to_thread(atomic_write, store.vector_path(r + 1), row.vector)
            for left in drop_partial_writes(store.layout.model_dir(r)):  # an export killed mid-write
                log.info("round %d: removed %s, a write the last stop interrupted", r, left.name)
            problem = None if row.state == COMMITTED else export_problem(store.layout.model_dir(r), row.vector_sha256)
            if problem:
                log.warning("round %d: export not intact (%s); exporting it again", r, problem)
            if row.state == COMMITTED or problem:
                log.info("round %d: redoing the export interrupted by the last stop", r)
                await engine.export(r)
            drop_spool(engine, r)
    engine.round = last + 1
    expected = store.get_meta("initial_vector_sha256") if last == 0 else rows[last].vector_sha256
    expected = present(expected, f"the recorded sha256 of round {engine.round}'s global vector")
    vector = read_verified_vector(store.vector_path(engine.round), engine.length, expected)
    engine.set_global(engine.round, vector, bytes.fromhex(expected))
    load_server_state(engine, engine.round)
    if engine.round > engine.config.plan.rounds:
        log.info("all %d rounds were already committed", last)
        if engine.evaluation.finished():
            store.set_meta(run_state=RunState.DONE.value)
            engine.finish(RoundState.DONE, f"{last} rounds completed")
        return False
    store.set_meta(run_state=RunState.RUNNING.value, run_message="")  # a failed run may be restarted: it retries
    open_row = rows.get(engine.round)
    if open_row is None or open_row.state not in (OPEN, FAILED):
        return False
    training = engine.begin_round()
    await replay(engine, open_row.round)
    if open_row.state == FAILED:  # its selection failed it: select afresh among the clients still here
        engine.select(attempt=1)
        return True
    # clients need time to reconnect after a restart: the resumed attempt gets a fresh deadline
    still_here = frozenset(c for c in open_row.selected if engine.registry.is_active(c))
    selected = still_here | frozenset(training.reported)
    engine.open_attempt(
        open_row.attempt,
        selected,
        f"resumed attempt {open_row.attempt} after a restart with {len(training.reported)} of "
        f"{len(selected)} updates replayed",
    )
    return True


async def replay(engine: RoundEngine, round: int) -> None:
    """Fold the acknowledged updates of `round` back in, each exactly once; drop orphan spool files."""
    store, training = engine.store, present(engine.training, "the replayed round")
    rows = store.submissions(round)
    named = {Path(r.spool_path).name for r in rows}
    spool = store.spool_dir(round)
    if spool.is_dir():
        for f in spool.iterdir():
            if f.name not in named:
                f.unlink(missing_ok=True)  # written, never acknowledged: as if it never arrived
    for r in rows:
        path = store.dir / r.spool_path
        if r.payload is not None:  # a small update, durable in its row: its unsynced spool file may be lost or torn
            await asyncio.to_thread(atomic_write, path, r.payload)
        payload = await asyncio.to_thread(read_verified_bytes, path, r.sha256)  # as received, in its codec
        training.aggregator.add(Update(r.client_id, r.num_examples, r.codec, path, payload=payload))
        training.record(r.client_id, r.num_examples, r.metrics)
    if rows:
        log.info("round %d: replayed %d acknowledged updates from the spool", round, len(rows))


def acknowledged_updates(engine: RoundEngine, round: int) -> list[Update]:
    """The acknowledged updates of `round` as the aggregator takes them, from their durable copies (spool
    files, or the bytes a small one's row holds): what `RoundAggregator.rebuild` refolds when it is stale."""
    return [
        Update(
            r.client_id,
            r.num_examples,
            r.codec,
            engine.store.dir / r.spool_path,
            None if r.payload is None else np.frombuffer(r.payload, np.uint8),
        )
        for r in engine.store.submissions(round)
    ]


def drop_spool(engine: RoundEngine, round: int) -> None:
    """Delete a committed round's spool (unless the config keeps spools); its files are recycled first, for
    co-located devices (`LocalVectorDir.recycle`), then for streamed uploads (`FreeSpoolFiles.recycle`):
    overwritten in a later round instead of re-created."""
    if engine.config.uploads.keep_spool:
        return
    spool = engine.store.spool_dir(round)
    if spool.is_dir():
        files = list(spool.iterdir())
        local = getattr(engine, "local_vectors", None)
        if local is not None:
            files = local.recycle(files)
        for f in engine.spool_free.recycle(files):
            f.unlink(missing_ok=True)
        spool.rmdir()


def save_server_state(engine: RoundEngine, round: int) -> None:
    """Write the server update's state that round `round` starts from (nothing for a stateless one)."""
    state = engine.strategy.server_update.state()
    if state is None:
        return
    buf = io.BytesIO()
    # numpy's stub checks **kwds against allow_pickle too
    np.savez(buf, **state)  # type: ignore[arg-type]
    atomic_write(engine.store.layout.server_state(round), buf.getbuffer())


def load_server_state(engine: RoundEngine, round: int) -> None:
    path = engine.store.layout.server_state(round)
    if path.is_file():
        with np.load(path) as data:
            engine.strategy.server_update.load_state({k: data[k] for k in data.files})
