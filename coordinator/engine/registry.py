"""The client registry: who joined, who left, who was seen recently enough to be selected.

Joins and leaves are durable (a row in SQLite); `last_seen` is kept in memory only (every RPC
touches it, and one fsync per poll would cost more than it is worth); after a restart a client
counts as seen when it last joined or left, until its next RPC.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from fedort.common import clock
from fedort.common.errors import NotFoundError, ProtocolError
from fedort.coordinator.rpc.client_ids import CLIENT_ID, check_new_client_id
from fedort.coordinator.rpc.join_limits import clip
from fedort.coordinator.state.schema import ClientRow
from fedort.coordinator.state.store import StateStore, now_ms


@dataclass
class _Client:
    row: ClientRow
    last_seen: float  # clock.now()


class ClientRegistry:
    """Registered clients, their liveness, and the set available for selection."""

    def __init__(
        self, store: StateStore, client_timeout_s: float, on_change: Callable[[], None] = lambda: None
    ) -> None:
        self._store = store
        self._timeout = client_timeout_s
        self._on_change = on_change
        self._clients: dict[str, _Client] = {r.client_id: _Client(r, r.last_seen_ms / 1000) for r in store.clients()}

    def __contains__(self, client_id: str) -> bool:
        return client_id in self._clients

    def __len__(self) -> int:
        return len(self._clients)

    def join(self, client_id: str, device_name: str, capabilities: Mapping[str, str], enrolled: bool = False) -> str:
        """Register (or re-activate) a client; returns its id (generated when `client_id` is empty). An id new to the
        registry must use the new-id alphabet unless `enrolled` (a token vouched for it: `client_ids`)."""
        if client_id and not CLIENT_ID.match(client_id):
            raise ProtocolError(f"client_id must match {CLIENT_ID.pattern}, got {clip(client_id)!r}")
        if client_id and client_id not in self._clients and not enrolled:
            check_new_client_id(client_id)
        if not client_id:
            client_id = "c-" + secrets.token_hex(6)
            while client_id in self._clients:
                client_id = "c-" + secrets.token_hex(6)
        now = now_ms()
        old = self._clients.get(client_id)
        row = ClientRow(client_id, device_name, dict(capabilities), old.row.joined_ms if old else now, now, True, "")
        self._store.upsert_client(row)
        self._clients[client_id] = _Client(row, now / 1000)
        self._on_change()
        return client_id

    def leave(self, client_id: str, reason: str) -> None:
        client = self.require(client_id)
        now = now_ms()
        self._store.set_client_left(client_id, reason, now)
        client.row = replace(client.row, active=False, left_reason=reason, last_seen_ms=now)
        self._on_change()

    def capabilities(self, client_id: str) -> Mapping[str, str]:
        """What the client announced at its last Join (empty for an unknown id)."""
        c = self._clients.get(client_id)
        return c.row.capabilities if c is not None else {}

    def require(self, client_id: str) -> _Client:
        client = self._clients.get(client_id)
        if client is None:
            raise NotFoundError(f"unknown client {client_id!r}: join first")
        return client

    def touch(self, client_id: str) -> None:
        """Note an RPC from `client_id` (NotFoundError if it never joined)."""
        client = self.require(client_id)
        now = clock.now()
        was = self._available(client, now)
        client.last_seen = now
        if not was and client.row.active:
            self._on_change()

    def _available(self, client: _Client, now: float) -> bool:
        if not client.row.active:
            return False
        return self._timeout <= 0 or now - client.last_seen <= self._timeout

    def is_active(self, client_id: str) -> bool:
        c = self._clients.get(client_id)
        return bool(c and c.row.active)

    def available(self) -> list[str]:
        """Ids of clients that may be selected now: joined, not left, seen within the timeout (sorted)."""
        now = clock.now()
        return sorted(cid for cid, c in self._clients.items() if self._available(c, now))

    def active_count(self) -> int:
        return sum(1 for c in self._clients.values() if c.row.active)
