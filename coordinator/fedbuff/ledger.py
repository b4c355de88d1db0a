"""The asynchronous mode's ledger: which global version each buffered update was trained on.

An update of client c trained on version b and accepted into the buffer of version v (it helps
make v + 1) is a `submissions` row (round = v, client c) like a synchronous update, plus a row
here, (v, c, b), in the same state.db (its own connection, synchronous=FULL). The ledger row is
written first, so every submission row has one; a ledger row without a submission (a crash in
between) does not count. What the ledger gives:

- replay: the base version, hence the staleness v − b and its weight, of each spooled update;
- exactly-once across versions: a client re-sending (after a lost acknowledgement) the update it
  trained on b is recognised as a duplicate even after its buffer committed, so it is not folded
  into a later buffer a second time;
- the all-time staleness histogram that `status` reports.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS async_updates (
    buffer INTEGER NOT NULL, client_id TEXT NOT NULL, base_version INTEGER NOT NULL,
    PRIMARY KEY (buffer, client_id));
CREATE INDEX IF NOT EXISTS async_updates_by_base ON async_updates (client_id, base_version);
"""

# a ledger row counts only with its submission row (both are written for an acknowledged update)
_COUNTED = "FROM async_updates a JOIN submissions s ON s.round = a.buffer AND s.client_id = a.client_id"


class AsyncLedger:
    """(buffer, client) -> base version, for the async engine (use from the event loop's thread)."""

    def __init__(self, db_path: Path) -> None:
        self._db = sqlite3.connect(db_path, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def record(self, buffer: int, client_id: str, base_version: int) -> None:
        """Durably note that `client_id`'s update in `buffer` was trained on `base_version` (before its submission row)."""
        self._db.execute(
            "INSERT OR REPLACE INTO async_updates (buffer, client_id, base_version) VALUES (?, ?, ?)",
            (buffer, client_id, base_version),
        )

    def base_of(self, buffer: int, client_id: str) -> int:
        row = self._db.execute(
            "SELECT base_version FROM async_updates WHERE buffer = ? AND client_id = ?", (buffer, client_id)
        ).fetchone()
        if row is None:
            raise KeyError(f"no ledger row for {client_id}'s update in the buffer of version {buffer}")
        return int(row[0])

    def counted_in(self, client_id: str, base_version: int) -> int | None:
        """The buffer that counted `client_id`'s update trained on `base_version`, or None."""
        row = self._db.execute(
            f"SELECT a.buffer {_COUNTED} WHERE a.client_id = ? AND a.base_version = ?", (client_id, base_version)
        ).fetchone()
        return None if row is None else int(row[0])

    def histogram(self) -> Counter:
        """Staleness -> counted updates, over the whole run."""
        rows = self._db.execute(f"SELECT a.buffer - a.base_version, COUNT(*) {_COUNTED} GROUP BY 1").fetchall()
        return Counter({int(s): int(n) for s, n in rows})

    def close(self) -> None:
        self._db.close()
