"""The coordinator database's tables (SQLite) and the typed rows `StateStore` reads and writes.

Six tables: `meta` (key/value: model id, schema version, run state), `clients`, `rounds` (one row
per round, its durable milestones OPEN -> COMMITTED -> EXPORTED, or FAILED), `submissions` (the
counted updates of an open round), `evaluations`, `transitions` (the round engine's logged state
changes). `create_tables` also adds the columns that older state dirs lack, so a state dir from
an earlier release opens unchanged. Queries live in `coordinator.state`; these are its boundary types.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from fedort.common.round_state import RoundRowState

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS clients (
    client_id TEXT PRIMARY KEY, device_name TEXT NOT NULL, capabilities TEXT NOT NULL,
    joined_ms INTEGER NOT NULL, last_seen_ms INTEGER NOT NULL, active INTEGER NOT NULL, left_reason TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS rounds (
    round INTEGER PRIMARY KEY, state TEXT NOT NULL, attempt INTEGER NOT NULL, selected TEXT NOT NULL,
    deadline_ms INTEGER NOT NULL, opened_ms INTEGER NOT NULL, closed_ms INTEGER,
    vector_sha256 TEXT, clients INTEGER NOT NULL DEFAULT 0, examples INTEGER NOT NULL DEFAULT 0,
    metrics TEXT NOT NULL DEFAULT '{}', model_path TEXT, message TEXT NOT NULL DEFAULT '', vector BLOB);
CREATE TABLE IF NOT EXISTS submissions (
    round INTEGER NOT NULL, client_id TEXT NOT NULL, num_examples INTEGER NOT NULL, metrics TEXT NOT NULL,
    sha256 TEXT NOT NULL, spool_path TEXT NOT NULL, received_ms INTEGER NOT NULL, codec TEXT NOT NULL DEFAULT 'raw',
    payload BLOB, PRIMARY KEY (round, client_id));
CREATE TABLE IF NOT EXISTS evaluations (
    round INTEGER NOT NULL, client_id TEXT NOT NULL, num_examples INTEGER NOT NULL, metrics TEXT NOT NULL,
    received_ms INTEGER NOT NULL, PRIMARY KEY (round, client_id));
CREATE TABLE IF NOT EXISTS transitions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, round INTEGER NOT NULL, from_state TEXT NOT NULL,
    to_state TEXT NOT NULL, at_unix_s REAL NOT NULL, why TEXT NOT NULL DEFAULT '');
"""

# Round row states as stored (the in-memory engine has more; these are the durable milestones).
OPEN, COMMITTED, EXPORTED, FAILED = (
    s.value for s in (RoundRowState.OPEN, RoundRowState.COMMITTED, RoundRowState.EXPORTED, RoundRowState.FAILED)
)


def create_tables(db: sqlite3.Connection) -> None:
    """Create the tables a state dir lacks, and the columns added since its release."""
    db.executescript(_SCHEMA)
    columns = {r[1] for r in db.execute("PRAGMA table_info(submissions)")}
    if "codec" not in columns:  # a state dir from before codecs were recorded: all its updates are raw
        db.execute("ALTER TABLE submissions ADD COLUMN codec TEXT NOT NULL DEFAULT 'raw'")
    if "payload" not in columns:  # ... or before small updates were kept inline
        db.execute("ALTER TABLE submissions ADD COLUMN payload BLOB")
    if "vector" not in {r[1] for r in db.execute("PRAGMA table_info(rounds)")}:  # ... or small vectors
        db.execute("ALTER TABLE rounds ADD COLUMN vector BLOB")


@dataclass(frozen=True)
class ClientRow:
    client_id: str
    device_name: str
    capabilities: dict[str, str]
    joined_ms: int
    last_seen_ms: int
    active: bool
    left_reason: str = ""

    @classmethod
    def from_sql(cls, r: sqlite3.Row) -> ClientRow:
        return cls(
            r["client_id"],
            r["device_name"],
            json.loads(r["capabilities"]),
            r["joined_ms"],
            r["last_seen_ms"],
            bool(r["active"]),
            r["left_reason"],
        )


@dataclass(frozen=True)
class RoundRow:
    round: int
    state: str
    attempt: int
    selected: tuple[str, ...]
    deadline_ms: int
    opened_ms: int
    closed_ms: int | None
    vector_sha256: str | None
    clients: int
    examples: int
    metrics: dict[str, float]
    model_path: str | None
    message: str
    vector: bytes | None = None  # a small committed vector's bytes, durable here until its export fsyncs its file

    @classmethod
    def from_sql(cls, r: sqlite3.Row) -> RoundRow:
        return cls(
            r["round"],
            r["state"],
            r["attempt"],
            tuple(json.loads(r["selected"])),
            r["deadline_ms"],
            r["opened_ms"],
            r["closed_ms"],
            r["vector_sha256"],
            r["clients"],
            r["examples"],
            json.loads(r["metrics"]),
            r["model_path"],
            r["message"],
            r["vector"] if "vector" in r.keys() else None,
        )


@dataclass(frozen=True)
class TransitionRow:
    """One logged state change of the round engine, with its wall-clock time."""

    round: int
    from_state: str
    to_state: str
    at_unix_s: float
    why: str = ""

    @classmethod
    def from_sql(cls, r: sqlite3.Row) -> TransitionRow:
        return cls(r["round"], r["from_state"], r["to_state"], r["at_unix_s"], r["why"])


@dataclass(frozen=True)
class SubmissionRow:
    round: int
    client_id: str
    num_examples: int
    metrics: dict[str, Any]  # name -> {"value": float, "sync_dist": bool}
    sha256: str
    spool_path: str
    received_ms: int
    codec: str = "raw"  # the spool file's wire codec: replay decodes it with the same decoder
    payload: bytes | None = None  # a small update's bytes, durable here (the spool file is a copy) until commit

    @classmethod
    def from_sql(cls, r: sqlite3.Row) -> SubmissionRow:
        keys = r.keys()
        return cls(
            r["round"],
            r["client_id"],
            r["num_examples"],
            json.loads(r["metrics"]),
            r["sha256"],
            r["spool_path"],
            r["received_ms"],
            *[r[k] for k in ("codec", "payload") if k in keys],
        )


__all__ = [
    "COMMITTED",
    "EXPORTED",
    "FAILED",
    "OPEN",
    "SCHEMA_VERSION",
    "ClientRow",
    "RoundRow",
    "SubmissionRow",
    "TransitionRow",
    "create_tables",
]
