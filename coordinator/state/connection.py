"""How the coordinator talks to its SQLite database: the connection settings and one durable transaction.

Both the event loop's `StateStore` and the threads' `SideWriter` open their connections and run their
transactions here, so durability (WAL, synchronous=FULL), file mode and the disk-full mapping are one rule.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from fedort.common.durable import private_file
from fedort.coordinator.state.storage import raise_if_full


def writable(db: Path, any_thread: bool = False) -> sqlite3.Connection:
    """A read-write connection: WAL, and every commit fsynced before it returns (synchronous=FULL); the
    database file is the owner's only (0600: it holds devices' updates)."""
    private_file(db)
    con = sqlite3.connect(db, isolation_level=None, timeout=30, check_same_thread=not any_thread)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    return con


def readonly(db: Path) -> sqlite3.Connection:
    """A read-only connection (`coordinator status` beside a running server)."""
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None, timeout=10)


def transaction(db: sqlite3.Connection, body: Callable[[sqlite3.Connection], object]) -> None:
    """Run `body` in one IMMEDIATE transaction, durable on return; a full disk raises StorageError."""
    try:
        db.execute("BEGIN IMMEDIATE")
        body(db)
        db.execute("COMMIT")
    except BaseException as e:
        # a failed COMMIT (e.g. disk full) may already have rolled back: a second ROLLBACK would
        # raise "cannot rollback - no transaction is active" and hide the real cause
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise_if_full(e)
        raise
