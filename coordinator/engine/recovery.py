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
`resume` runs the steps and sets what they find in the engine, through the few calls `Resuming` names.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from fedort.common.durable import atomic_write, drop_partial_writes
from fedort.common.invariants import present
from fedort.common.round_state import RoundState, RunState
from fedort.coordinator.aggregation import Update
from fedort.coordinator.aggregation.server_update import ServerUpdate
from fedort.coordinator.engine.training_round import TrainingRound
from fedort.coordinator.state.integrity import export_problem, read_verified_bytes, read_verified_vector
from fedort.coordinator.state.layout import StateLayout
from fedort.coordinator.state.schema import COMMITTED, EXPORTED, FAILED, OPEN, RoundRow
from fedort.coordinator.state.store import StateStore
from fedort.protos.vector_stream import vector_digest

log = logging.getLogger(__name__)


class Resuming(Protocol):
    """What resuming sets in the engine: its round, global vector and open attempt, or the run's end."""

    round: int

    def set_global(self, round: int, vector: np.ndarray, sha256: bytes, blake3: bytes | None = None) -> None: ...

    def begin_round(self) -> TrainingRound: ...

    def select(self, attempt: int) -> None: ...

    def open_attempt(self, attempt: int, selected: frozenset[str], why: str) -> None: ...

    def finish(self, state: RoundState, message: str) -> None: ...

    async def export(self, round: int) -> None: ...

    def drop_spool(self, round: int) -> None: ...


async def resume(
    engine: Resuming,
    store: StateStore,
    *,
    length: int,
    rounds: int,
    initial_vector: Callable[[], np.ndarray],
    server_update: ServerUpdate,
    evaluated: Callable[[], bool],
    is_active: Callable[[str], bool],
) -> bool:
    """Steps 1-4 above for a run of `rounds` rounds; True if an open round was resumed (the engine is then
    TRAINING). `evaluated()`: the evaluation phase has nothing (more) to do; `is_active(client)`: still joined."""
    last = await restore_committed(store, initial_vector, engine.export, engine.drop_spool)
    engine.round = last + 1
    engine.set_global(engine.round, *committed_global(store, last, length))
    load_server_state(server_update, store.layout, engine.round)
    if engine.round > rounds:
        log.info("all %d rounds were already committed", last)
        if evaluated():
            store.set_meta(run_state=RunState.DONE.value)
            engine.finish(RoundState.DONE, f"{last} rounds completed")
        return False
    store.set_meta(run_state=RunState.RUNNING.value, run_message="")  # a failed run may be restarted: it retries
    row = resumable_row(store, engine.round)
    if row is None:
        return False
    training = engine.begin_round()
    await replay(store, training)
    if row.state == FAILED:  # its selection failed it: select afresh among the clients still here
        engine.select(attempt=1)
        return True
    # clients need time to reconnect after a restart: the resumed attempt gets a fresh deadline
    selected = frozenset(c for c in row.selected if is_active(c)) | frozenset(training.reported)
    engine.open_attempt(
        row.attempt,
        selected,
        f"resumed attempt {row.attempt} after a restart with {len(training.reported)} of "
        f"{len(selected)} updates replayed",
    )
    return True


async def restore_committed(
    store: StateStore,
    initial_vector: Callable[[], np.ndarray],
    export: Callable[[int], Awaitable[None]],
    drop_spool: Callable[[int], None],
) -> int:
    """Steps 1 and 2 above (`export(round)` redoes an export, `drop_spool(round)` deletes a committed round's
    spool); returns the last committed round (0 for none)."""
    if store.get_meta("initial_vector_sha256") is None:
        vector = initial_vector()
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
                await export(r)
            drop_spool(r)
    return last


def committed_global(store: StateStore, last: int, length: int) -> tuple[np.ndarray, bytes]:
    """Step 3: the global vector round `last` + 1 trains from and its sha256, checked against what its commit
    recorded (`CorruptStateError` if the file does not hold it)."""
    if last == 0:
        expected = store.get_meta("initial_vector_sha256")
    else:
        expected = next(r.vector_sha256 for r in store.rounds() if r.round == last)
    expected = present(expected, f"the recorded sha256 of round {last + 1}'s global vector")
    return read_verified_vector(store.vector_path(last + 1), length, expected), bytes.fromhex(expected)


def resumable_row(store: StateStore, round: int) -> RoundRow | None:
    """Step 4: the row of `round` if it is open or failed (a round to resume), else None."""
    row = next((r for r in store.rounds() if r.round == round), None)
    return row if row is not None and row.state in (OPEN, FAILED) else None


async def replay(store: StateStore, training: TrainingRound) -> None:
    """Fold the acknowledged updates of `training.round` back in, each exactly once; drop orphan spool files."""
    round = training.round
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


def acknowledged_updates(store: StateStore, round: int) -> list[Update]:
    """The acknowledged updates of `round` as the aggregator takes them, from their durable copies (spool
    files, or the bytes a small one's row holds): what `RoundAggregator.rebuild` refolds when it is stale."""
    return [
        Update(
            r.client_id,
            r.num_examples,
            r.codec,
            store.dir / r.spool_path,
            None if r.payload is None else np.frombuffer(r.payload, np.uint8),
        )
        for r in store.submissions(round)
    ]


def save_server_state(server_update: ServerUpdate, layout: StateLayout, round: int) -> None:
    """Write the server update's state that round `round` starts from (nothing for a stateless one)."""
    state = server_update.state()
    if state is None:
        return
    buf = io.BytesIO()
    # numpy's stub checks **kwds against allow_pickle too
    np.savez(buf, **state)  # type: ignore[arg-type]
    atomic_write(layout.server_state(round), buf.getbuffer())


def load_server_state(server_update: ServerUpdate, layout: StateLayout, round: int) -> None:
    path = layout.server_state(round)
    if path.is_file():
        with np.load(path) as data:
            server_update.load_state({k: data[k] for k in data.files})
