"""A small committed global vector is durable inside its round row until its export fsyncs the file.

`_commit` writes such a vector's file without fsyncs (`inline_update_bytes` bounds "small") and
puts its bytes in the commit's row; the background export fsyncs the file and then drops the
bytes. A power cut in between may lose or tear the file: recovery rewrites it from the row.
Real coordinator, real SQLite; the power cut is played by rolling the row back to what it held
before the export and tearing the file.
"""

from __future__ import annotations

import asyncio
import sqlite3

import numpy as np
import pytest

from coordinator_fixtures import mlp_artifacts, start_coordinator, stub_client  # noqa: F401 (fixtures)


async def wait_for(predicate, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


@pytest.mark.slow
async def test_a_small_vector_lost_before_its_export_is_rewritten_from_its_row_on_restart(
        start_coordinator, stub_client, tmp_path):
    state = tmp_path / "state"
    coord = await start_coordinator(min_clients=1, rounds=2, state_dir=state)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    task = await client.poll("client-a", model)
    _, g = await client.download_vector("client-a", model, task.round)
    assert (await client.submit("client-a", model, 1, (g + np.float32(0.5)).astype(np.float32), 10)).accepted
    await wait_for(lambda: coord.engine.round == 2 and coord.engine.state.name == "TRAINING")
    await coord.engine.exports_done()
    row = coord.engine.store.rounds()[0]
    assert (row.state, row.vector) == ("EXPORTED", None)          # exported: the file is durable, the row let go
    path = coord.engine.store.vector_path(2)
    committed = path.read_bytes()
    await coord.stop(grace=0)

    db = sqlite3.connect(state / "state.db")                       # as before the export, after a power cut:
    with db:
        db.execute("UPDATE rounds SET state = 'COMMITTED', model_path = NULL, vector = ? WHERE round = 1",
                   (committed,))
    db.close()
    path.write_bytes(committed[: len(committed) // 2])             # ... the unsynced file torn

    coord = await start_coordinator(min_clients=1, rounds=2, state_dir=state)
    assert path.read_bytes() == committed
    row = coord.engine.store.rounds()[0]
    assert (row.state, row.vector) == ("EXPORTED", None)           # exported again on restart
    assert coord.engine.global_vector.sha256.hex() == row.vector_sha256
    assert (await stub_client(coord.port).poll("client-a", model)).round == 2   # round 2 resumes from it
