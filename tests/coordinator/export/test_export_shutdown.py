"""Stopping the coordinator while a round's export is being written waits for that export and records it.

The export runs in a thread of its own, which a stop cannot cancel: closing the connection it commits
through under it once crashed the process (SQLite used after close)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

from coordinator_fixtures import mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.common.faults import armed


async def test_a_stop_during_an_export_waits_for_it_and_the_round_is_recorded_exported(start_coordinator, stub_client):
    reached, release = threading.Event(), threading.Event()

    def hold() -> None:               # the export's thread, its model written, before it records the export
        reached.set()
        release.wait(30)

    with armed("export.before_mark", hold):
        coord = await start_coordinator(rounds=2, min_clients=1)
        client = stub_client(coord.port)
        model = (await client.join("client-a")).model_id
        await client.fit_round("client-a", model, 1.0, 10)      # round 1 commits; its export starts
        assert await asyncio.to_thread(reached.wait, 30), "round 1's export did not start"
        # let the export go on only once the stop is under way (a stop with no grace reaches the exports at once)
        threading.Timer(0.2, release.set).start()
        await coord.stop(grace=0)
    with sqlite3.connect(f"file:{coord.state_dir / 'state.db'}?mode=ro", uri=True) as db:
        assert db.execute("SELECT state FROM rounds WHERE round = 1").fetchone() == ("EXPORTED",)
