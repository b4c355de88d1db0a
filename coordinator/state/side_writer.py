"""A second SQLite connection for durable writes off the event loop: group commits, export marks.

The event loop's `StateStore` connection blocks the loop for every fsync it waits on. Work that
already runs in a thread of its own (the group commit of arrivals, a round's background export)
commits through this connection instead, under the store's `write_lock`, so the two never meet
SQLite's busy handler (which sleeps in whole milliseconds). Same durability: WAL, synchronous=FULL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from fedort.coordinator.state.connection import transaction, writable

if TYPE_CHECKING:
    from fedort.coordinator.state.schema import SubmissionRow
    from fedort.coordinator.state.store import StateStore

INSERT_SUBMISSION = (
    "INSERT INTO submissions (round, client_id, num_examples, metrics, sha256, spool_path, "
    "received_ms, codec, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def submission_args(row: SubmissionRow) -> tuple:
    return (
        row.round,
        row.client_id,
        row.num_examples,
        json.dumps(row.metrics, sort_keys=True),
        row.sha256,
        row.spool_path,
        row.received_ms,
        row.codec,
        row.payload,
    )


class SideWriter:
    """Commits statements in one durable transaction per call, from one (any) thread at a time."""

    def __init__(self, store: StateStore) -> None:
        self._lock = store.write_lock
        self._db = writable(store.layout.db, any_thread=True)

    def add(self, rows: Iterable[SubmissionRow]) -> None:
        """Insert every submission row or none (durable on return); a full disk raises StorageError."""
        self._run(lambda db: db.executemany(INSERT_SUBMISSION, [submission_args(r) for r in rows]))

    def execute(self, statements: Iterable[tuple[str, tuple]]) -> None:
        """Run `statements` in one transaction (durable on return)."""
        self._run(lambda db: [db.execute(sql, args) for sql, args in statements])

    def _run(self, body) -> None:
        with self._lock:
            transaction(self._db, body)

    def close(self) -> None:
        self._db.close()
