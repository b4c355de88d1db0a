"""Download deltas: the round's global vector sent as `xor+zstd` against the previous round's, when the
device says it has that one cached (VectorRequest.cached_sha256).

    payload(round r, cached) = encode_download(g_r, g_{r-1})   iff  cached == sha256(g_{r-1}), else raw

Encoded once per round (every device that asks shares the one payload; only the latest round is
kept) in a worker thread; g_{r-1} is read from the state dir and checked against the sha256 its
commit recorded. Lossless: the device rebuilds g_r bit for bit and checks it against the task's
vector_sha256 (protos/update_codecs/xor_delta.py).
"""

from __future__ import annotations

import asyncio
import hashlib

from fedort.common.errors import FedortError
from fedort.coordinator.engine.training_round import GlobalVector
from fedort.coordinator.state.store import StateStore, read_vector
from fedort.protos.update_codecs.xor_delta import encode_download


class DownloadDeltas:
    """The engine's cache of download deltas (one round's worth)."""

    def __init__(self, store: StateStore) -> None:
        self.store = store  # where g_{r-1} and its recorded sha256 are read
        self._round = 0
        self._payload: asyncio.Future | None = None
        self._base_sha = b""

    def _previous_sha(self, round: int) -> bytes:
        store = self.store
        if round == 2:
            return bytes.fromhex(store.get_meta("initial_vector_sha256") or "")
        row = next((r for r in store.rounds() if r.round == round - 2), None)
        return bytes.fromhex(row.vector_sha256) if row is not None and row.vector_sha256 else b""

    async def payload(self, g: GlobalVector, cached_sha256: bytes) -> bytes | None:
        """The delta payload of `g` against the vector `cached_sha256` names, or None (send raw)."""
        if g.round < 2 or len(cached_sha256) != 32 or cached_sha256 == g.sha256:
            return None
        if self._round != g.round:
            self._round, self._payload, self._base_sha = g.round, None, self._previous_sha(g.round)
        if cached_sha256 != self._base_sha:
            return None
        if self._payload is None:
            self._payload = asyncio.ensure_future(asyncio.to_thread(self._encode, g, cached_sha256))
        return await asyncio.shield(self._payload)

    def _encode(self, g: GlobalVector, base_sha: bytes) -> bytes | None:
        try:
            base = read_vector(self.store.vector_path(g.round - 1), len(g.vector))
        except (OSError, FedortError):
            return None  # no longer readable: send raw
        if hashlib.sha256(base.data.cast("B")).digest() != base_sha:
            return None  # the file does not hold what the commit recorded: send raw (recovery reports it)
        return encode_download(g.vector, base)
