"""`DeviceStore`: enrolled devices and their bearer tokens, kept only as salted hashes.

`fedort coordinator enroll NAME` issues a token `fedort_<client_id>_<secret>` once; the state dir's
`devices.db` (SQLite, beside `state.db`, so enrollment works before the first `serve`) keeps the
client id, the device name and HMAC-SHA256(salt, secret) with a random per-state-dir salt. A
token names its client id, so verifying it is one dictionary lookup and one constant-time compare
against the device table held in memory. The table is read again whenever `devices.db` (or its
WAL) changed on disk (size, mtime or inode), so an `enroll` or `revoke` from another process takes
effect on the next call; when the database cannot be read (a full disk: SQLite then cannot create
its shared-memory file), tokens are still checked against the last table read.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from fedort.common import clock
from fedort.common.durable import private_file
from fedort.common.errors import ConfigError, UnauthenticatedError
from fedort.coordinator.rpc.client_ids import CLIENT_ID, NEW_CLIENT_ID

log = logging.getLogger(__name__)

DB_NAME = "devices.db"
TOKEN_PREFIX = "fedort_"
_SECRET = re.compile(r"^[0-9a-f]{64}$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS devices (
    client_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    token_hash BLOB NOT NULL,
    enrolled_ms INTEGER NOT NULL,
    revoked_ms INTEGER
);
"""


@dataclass(frozen=True)
class Device:
    """One enrolled device as listed by `fedort coordinator devices` (never its token)."""

    client_id: str
    name: str
    enrolled_ms: int
    revoked_ms: int | None

    @property
    def revoked(self) -> bool:
        return self.revoked_ms is not None


def parse_token(token: str) -> tuple[str, str]:
    """(client_id, secret) of a well-formed token; UnauthenticatedError saying the expected form otherwise."""
    client_id, sep, secret = token.removeprefix(TOKEN_PREFIX).rpartition("_")
    if not token.startswith(TOKEN_PREFIX) or not sep or not CLIENT_ID.match(client_id) or not _SECRET.match(secret):
        raise UnauthenticatedError(
            "malformed device token; expected 'fedort_<client_id>_<64 hex digits>' as issued by "
            "`fedort coordinator enroll`"
        )
    return client_id, secret


def client_id_of(token: str) -> str | None:
    """The client id a token names, or None when it is not a fedort device token."""
    try:
        return parse_token(token)[0]
    except UnauthenticatedError:
        return None


class DeviceStore:
    """Enroll, revoke, list and verify devices of one state dir (thread-safe: one connection per call)."""

    def __init__(self, state_dir: str | Path) -> None:
        self.path = Path(state_dir) / DB_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.executescript(_SCHEMA)
            row = con.execute("SELECT value FROM meta WHERE key = 'salt'").fetchone()
            if row is None:
                con.execute("INSERT OR IGNORE INTO meta VALUES ('salt', ?)", (secrets.token_bytes(32),))
                row = con.execute("SELECT value FROM meta WHERE key = 'salt'").fetchone()
        self._salt = bytes(row[0])
        self._table: dict[str, tuple[bytes, int | None]] | None = None  # client id -> (token hash, revoked ms)
        self._signature: tuple | None = None
        self._warned: tuple | None = None
        self._table_lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        private_file(self.path)  # token hashes: the owner's only
        con = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        return con

    def _hash(self, secret: str) -> bytes:
        return hmac.new(self._salt, secret.encode(), hashlib.sha256).digest()

    def enroll(self, name: str, client_id: str | None = None) -> tuple[Device, str]:
        """Register a device; returns it and its token (the only time the token exists in clear)."""
        if not name:
            raise ConfigError("enroll needs a device name")
        if client_id is None:
            client_id = name if NEW_CLIENT_ID.match(name) else "c-" + secrets.token_hex(6)
        if not NEW_CLIENT_ID.match(client_id):
            raise ConfigError(f"client id must match {NEW_CLIENT_ID.pattern}, got {client_id!r}")
        secret = secrets.token_hex(32)
        now = clock.now_ms()
        con = self._connect()
        try:
            row = con.execute("SELECT revoked_ms FROM devices WHERE client_id = ?", (client_id,)).fetchone()
            if row is not None and row[0] is None:
                raise ConfigError(f"device {client_id} is already enrolled; revoke it first to issue a new token")
            con.execute(
                "INSERT OR REPLACE INTO devices VALUES (?, ?, ?, ?, NULL)", (client_id, name, self._hash(secret), now)
            )
        finally:
            con.close()
        return Device(client_id, name, now, None), f"{TOKEN_PREFIX}{client_id}_{secret}"

    def revoke(self, name_or_id: str) -> list[Device]:
        """Revoke the device with that client id, else every active device with that name; ConfigError if none."""
        now = clock.now_ms()
        con = self._connect()
        try:
            ids = [
                r[0]
                for r in con.execute(
                    "SELECT client_id FROM devices WHERE client_id = ? AND revoked_ms IS NULL", (name_or_id,)
                )
            ]
            if not ids:
                ids = [
                    r[0]
                    for r in con.execute(
                        "SELECT client_id FROM devices WHERE name = ? AND revoked_ms IS NULL", (name_or_id,)
                    )
                ]
            if not ids:
                raise ConfigError(
                    f"no active device with client id or name {name_or_id!r} in {self.path}; "
                    "`fedort coordinator devices` lists them"
                )
            con.executemany("UPDATE devices SET revoked_ms = ? WHERE client_id = ?", [(now, i) for i in ids])
        finally:
            con.close()
        return [d for d in self.devices() if d.client_id in ids]

    def devices(self) -> list[Device]:
        con = self._connect()
        try:
            rows = con.execute(
                "SELECT client_id, name, enrolled_ms, revoked_ms FROM devices ORDER BY enrolled_ms, client_id"
            ).fetchall()
        finally:
            con.close()
        return [Device(*r) for r in rows]

    def verify(self, token: str) -> str:
        """The client id a token authenticates; UnauthenticatedError (saying why) for an unknown or revoked one."""
        client_id, secret = parse_token(token)
        row = self._device_table().get(client_id)
        # compare even when the device is unknown, so timing does not tell enrolled ids apart
        ok = hmac.compare_digest(self._hash(secret), bytes(row[0]) if row else b"\0" * 32)
        if row is None or not ok:
            raise UnauthenticatedError(
                f"device token for {client_id} is not valid here; expected a token issued by "
                "`fedort coordinator enroll` on this coordinator"
            )
        if row[1] is not None:
            raise UnauthenticatedError(f"device {client_id} was revoked; enroll it again for a new token")
        return client_id

    def _files_signature(self) -> tuple:
        sig: list[tuple[int, int, int] | None] = []
        for path in (self.path, self.path.with_name(self.path.name + "-wal")):
            try:
                st = os.stat(path)
                sig.append((st.st_ino, st.st_size, st.st_mtime_ns))
            except FileNotFoundError:
                sig.append(None)
        return tuple(sig)

    def _device_table(self) -> dict[str, tuple[bytes, int | None]]:
        """The device table, re-read only when the database files changed (or kept when they cannot be read)."""
        with self._table_lock:
            signature = self._files_signature()
            if self._table is not None and signature == self._signature:
                return self._table
            try:
                con = self._connect()
                try:
                    rows = con.execute("SELECT client_id, token_hash, revoked_ms FROM devices").fetchall()
                finally:
                    con.close()
            except (sqlite3.Error, OSError) as e:
                if self._table is None:
                    raise
                if self._warned != signature:  # once per change on disk, not once per call
                    self._warned = signature
                    log.warning(
                        "cannot read %s (%s); checking device tokens against the table read before", self.path, e
                    )
                return self._table
            self._table = {r[0]: (bytes(r[1]), r[2]) for r in rows}
            self._signature = signature
            return self._table


__all__ = ["DB_NAME", "Device", "DeviceStore", "client_id_of", "parse_token"]
