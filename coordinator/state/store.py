"""Durable coordinator state: one SQLite database plus atomically written vector files.

The directory's layout is `coordinator.state_layout.StateLayout`; the tables and their typed rows are
`coordinator.state_schema`. Files are written temp + fsync +
rename + directory fsync, so a crash leaves either the old file or the new one. The database is
the source of truth: a file that no row names (an orphan spool file, a vector of an uncommitted
round) is ignored or rewritten on recovery.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedort.common import clock
from fedort.common.errors import ConfigError, CorruptStateError, StorageError, VectorError
from fedort.common.round_state import RunState
from fedort.coordinator.state import connection
from fedort.coordinator.state.layout import DB_NAME, StateLayout
from fedort.coordinator.state.schema import (
    COMMITTED,
    EXPORTED,
    FAILED,
    OPEN,
    SCHEMA_VERSION,
    ClientRow,
    RoundRow,
    SubmissionRow,
    TransitionRow,
    create_tables,
)
from fedort.coordinator.state.storage import raise_if_full, storage_error

if TYPE_CHECKING:
    from fedort.coordinator.state.side_writer import SideWriter

log = logging.getLogger(__name__)


def now_ms() -> int:
    """Milliseconds since the epoch on the process's clock (`fedort.common.clock`: a test may drive it)."""
    return clock.now_ms()


def read_vector(path: Path, length: int | None = None) -> np.ndarray:
    """A raw float32 vector file (checked against `length` if given)."""
    vec = np.fromfile(path, dtype="<f4")
    if length is not None and vec.shape[0] != length:
        raise VectorError(f"{path} holds {vec.shape[0]} elements, expected {length}")
    return vec


class StateStore:
    """The SQLite side of a state directory (use from one thread: the event loop's).

    The one exception is `submission_writer()`: a second connection for the group commit of
    arrivals (`coordinator.arrival_commit`) or the background export, in their own thread. Both connections write under
    `write_lock`, so they never meet SQLite's busy handler (which sleeps in milliseconds).
    """

    def __init__(self, state_dir: str | os.PathLike, *, readonly: bool = False) -> None:
        self.dir = Path(state_dir)
        self.layout = StateLayout(self.dir)
        self.readonly = readonly
        self._transitions: list[TransitionRow] = []
        self._deferred: list[tuple[str, tuple]] = []  # statements for the next transaction (commit_round(defer=True))
        self.write_lock = threading.Lock()
        db = self.layout.db
        try:
            self._open(db, readonly)
        except sqlite3.DatabaseError as e:
            if storage_error(e) is not None:
                raise_if_full(e)
            raise CorruptStateError(
                f"{db} is not a usable SQLite database ({e}); it is the coordinator's state: "
                "restore it from a backup or start over with a new --state-dir"
            ) from None
        self._db.row_factory = sqlite3.Row

    def _open(self, db: Path, readonly: bool) -> None:
        if readonly:
            if not db.is_file():
                raise ConfigError(f"no coordinator state in {self.dir} ({DB_NAME} missing)")
            self._db = connection.readonly(db)
        else:
            for sub in (self.layout.vectors, self.layout.spool, self.layout.models):
                sub.mkdir(parents=True, exist_ok=True)
            self._db = connection.writable(db)
            create_tables(self._db)
        self._db.execute("SELECT COUNT(*) FROM meta").fetchone()  # reads a page: garbage fails here, not later

    def close(self) -> None:
        try:
            if (self._transitions or self._deferred) and not self.readonly:
                self._tx(())
        except StorageError as e:  # the last transitions only: closing must not fail on a full disk
            log.warning(
                "%s: the last %d round transitions were not recorded: %s", self.layout.db, len(self._transitions), e
            )
        finally:
            self._db.close()

    def _tx(self, statements: Iterable[tuple[str, tuple]]) -> None:
        """Run statements in one transaction (durable on return: synchronous=FULL), with pending transitions."""
        with self.write_lock:
            self._tx_locked(statements)

    def _tx_locked(self, statements: Iterable[tuple[str, tuple]]) -> None:
        def body(db: sqlite3.Connection) -> None:
            for sql, args in [*self._deferred, *statements]:
                db.execute(sql, args)
            for t in self._transitions:
                db.execute(
                    "INSERT INTO transitions (round, from_state, to_state, at_unix_s, why) VALUES (?, ?, ?, ?, ?)",
                    (t.round, t.from_state, t.to_state, t.at_unix_s, t.why),
                )

        connection.transaction(self._db, body)
        self._transitions, self._deferred = [], []  # kept for the next transaction if this one failed

    # ---- paths ----------------------------------------------------------------------------------

    def vector_path(self, round: int) -> Path:
        return self.layout.vector(round)

    def spool_dir(self, round: int) -> Path:
        return self.layout.spool_dir(round)

    def spool_path(self, round: int, client_id: str) -> Path:
        return self.layout.spool_file(round, client_id)

    def model_dir(self, round: int) -> Path:
        return self.layout.model_dir(round)

    @property
    def artifacts_dir(self) -> Path:
        return self.layout.artifacts

    # ---- transitions ----------------------------------------------------------------------------

    def note_transition(self, row: TransitionRow) -> None:
        """Record a state change with the next transaction (no fsync of its own: a round has several)."""
        self._transitions.append(row)

    def transitions(self) -> list[TransitionRow]:
        """Every recorded state change, oldest first (none for a state dir older than the table)."""
        try:
            rows = self._db.execute("SELECT * FROM transitions ORDER BY seq").fetchall()
        except sqlite3.OperationalError:
            return []
        return [TransitionRow.from_sql(r) for r in rows]

    # ---- meta -----------------------------------------------------------------------------------

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row["value"] if row else default

    def set_meta(self, **values: str) -> None:
        self._tx(("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (k, str(v))) for k, v in values.items())

    def claim(self, model_id: str, config_json: str) -> None:
        """Bind this state dir to `model_id` (first start) or check that it already is."""
        existing = self.get_meta("model_id")
        if existing is None:
            self.set_meta(
                model_id=model_id,
                schema_version=str(SCHEMA_VERSION),
                created_ms=str(now_ms()),
                config=config_json,
                run_state=RunState.RUNNING.value,
            )
        elif existing != model_id:
            raise ConfigError(
                f"state dir {self.dir} belongs to model {existing[:16]}…, but the artifacts are model "
                f"{model_id[:16]}…; use a new --state-dir for a different model"
            )
        else:
            self.set_meta(config=config_json)

    # ---- clients --------------------------------------------------------------------------------

    def upsert_client(self, row: ClientRow) -> None:
        self._tx(
            [
                (
                    "INSERT INTO clients (client_id, device_name, capabilities, joined_ms, last_seen_ms, active, left_reason) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(client_id) DO UPDATE SET device_name=excluded.device_name, "
                    "capabilities=excluded.capabilities, last_seen_ms=excluded.last_seen_ms, active=excluded.active, "
                    "left_reason=excluded.left_reason",
                    (
                        row.client_id,
                        row.device_name,
                        json.dumps(row.capabilities, sort_keys=True),
                        row.joined_ms,
                        row.last_seen_ms,
                        int(row.active),
                        row.left_reason,
                    ),
                )
            ]
        )

    def set_client_left(self, client_id: str, reason: str, at_ms: int) -> None:
        self._tx(
            [
                (
                    "UPDATE clients SET active = 0, left_reason = ?, last_seen_ms = ? WHERE client_id = ?",
                    (reason, at_ms, client_id),
                )
            ]
        )

    def clients(self) -> list[ClientRow]:
        rows = self._db.execute("SELECT * FROM clients ORDER BY client_id").fetchall()
        return [ClientRow.from_sql(r) for r in rows]

    # ---- rounds ---------------------------------------------------------------------------------

    def open_round(self, round: int, attempt: int, selected: Iterable[str], deadline_ms: int) -> None:
        """Record round `round` as open (TRAINING) for this attempt and selection."""
        self._tx(
            [
                (
                    "INSERT INTO rounds (round, state, attempt, selected, deadline_ms, opened_ms) VALUES (?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(round) DO UPDATE SET state=excluded.state, attempt=excluded.attempt, "
                    "selected=excluded.selected, deadline_ms=excluded.deadline_ms",
                    (round, OPEN, attempt, json.dumps(sorted(selected)), deadline_ms, now_ms()),
                )
            ]
        )

    def commit_round(
        self,
        round: int,
        vector_sha256: str,
        clients: int,
        examples: int,
        metrics: dict[str, float],
        defer: bool = False,
        vector: bytes | None = None,
    ) -> None:
        """Mark round `round` committed: its result vector file (round+1) is durable and final (its inline
        update payloads are not needed any more). `defer`: in the next transaction instead (the next
        round's `open_round`, one fsync for both; `flush()` if nothing may follow soon): until then
        the round is not committed on disk, and nothing may act on it (no task of the next round).
        `vector`: a small result vector's bytes, durable in the row (its file need not be fsynced yet)."""
        statements = [
            (
                "UPDATE rounds SET state=?, closed_ms=?, vector_sha256=?, clients=?, examples=?, metrics=?, vector=? "
                "WHERE round=?",
                (
                    COMMITTED,
                    now_ms(),
                    vector_sha256,
                    clients,
                    examples,
                    json.dumps(metrics, sort_keys=True),
                    vector,
                    round,
                ),
            ),
            ("UPDATE submissions SET payload = NULL WHERE round = ? AND payload IS NOT NULL", (round,)),
        ]
        if defer:
            self._deferred += statements
        else:
            self._tx(statements)

    @property
    def deferred(self) -> bool:
        """A deferred commit waits for the next transaction."""
        return bool(self._deferred)

    def flush(self) -> None:
        """Commit what waits for the next transaction (deferred statements, transitions) now."""
        if self._deferred or self._transitions:
            self._tx(())

    def mark_exported(self, round: int, model_path: str, writer: SideWriter | None = None) -> None:
        """Round `round`'s export is complete (through `writer`, a side connection, from the export's thread);
        its vector file is durable by then, so the row drops the vector's bytes."""
        statement = (
            "UPDATE rounds SET state=?, model_path=?, vector=NULL WHERE round=?",
            (EXPORTED, model_path, round),
        )
        writer.execute([statement]) if writer is not None else self._tx([statement])

    def fail_round(self, round: int, message: str) -> None:
        self._tx(
            [
                ("UPDATE rounds SET state=?, closed_ms=?, message=? WHERE round=?", (FAILED, now_ms(), message, round)),
                ("INSERT OR REPLACE INTO meta (key, value) VALUES ('run_state', ?)", (RunState.FAILED.value,)),
                ("INSERT OR REPLACE INTO meta (key, value) VALUES ('run_message', ?)", (message,)),
            ]
        )

    def forget_submissions(self, round: int) -> None:
        """Delete round `round`'s submission rows (a secure-aggregation round that aborted: its masked
        inputs can never be unmasked, so a restarted round starts from no updates)."""
        self._tx([("DELETE FROM submissions WHERE round=?", (round,))])

    def rounds(self) -> list[RoundRow]:
        rows = self._db.execute("SELECT * FROM rounds ORDER BY round").fetchall()
        return [RoundRow.from_sql(r) for r in rows]

    # ---- submissions ----------------------------------------------------------------------------

    def add_submission(self, row: SubmissionRow) -> None:
        from fedort.coordinator.state.side_writer import INSERT_SUBMISSION, submission_args

        self._tx([(INSERT_SUBMISSION, submission_args(row))])

    def submission_writer(self) -> SideWriter:
        """A second connection that commits from another thread (see the class docstring)."""
        from fedort.coordinator.state.side_writer import SideWriter

        return SideWriter(self)

    def submissions(self, round: int) -> list[SubmissionRow]:
        rows = self._db.execute("SELECT * FROM submissions WHERE round = ? ORDER BY client_id", (round,)).fetchall()
        return [SubmissionRow.from_sql(r) for r in rows]

    def submission_digest(self, round: int, client_id: str) -> str | None:
        """The stored payload digest of `client_id`'s counted update of round `round` (None: none counted)."""
        row = self._db.execute(
            "SELECT sha256 FROM submissions WHERE round = ? AND client_id = ?", (round, client_id)
        ).fetchone()
        return None if row is None else row["sha256"]

    # ---- evaluations ----------------------------------------------------------------------------

    def add_evaluation(self, round: int, client_id: str, num_examples: int, metrics: dict[str, Any]) -> None:
        self._tx(
            [
                (
                    "INSERT INTO evaluations (round, client_id, num_examples, metrics, received_ms) VALUES (?, ?, ?, ?, ?)",
                    (round, client_id, num_examples, json.dumps(metrics, sort_keys=True), now_ms()),
                )
            ]
        )

    def evaluations(self, round: int) -> list[tuple[str, int, dict[str, Any]]]:
        rows = self._db.execute("SELECT * FROM evaluations WHERE round = ? ORDER BY client_id", (round,)).fetchall()
        return [(r["client_id"], r["num_examples"], json.loads(r["metrics"])) for r in rows]

    def dump(self) -> str:
        """Every row as SQL text (tests compare it before and after a rejected request)."""
        return "\n".join(self._db.iterdump())
