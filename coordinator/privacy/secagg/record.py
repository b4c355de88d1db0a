"""The durable record of a secure-aggregation round: its protocol state in the state dir, and reading it back.

Three files per round under STATE/secagg/, each written atomically (fedort.common.durable.atomic_write)
and each but `.sealed` tagged with an 8-byte sequence number:

    round-NNNN.state   the protocol state as JSON, after every accepted message and phase close
    round-NNNN.sum     state + the uint64 accumulator, when masked-input collection closes
    round-NNNN.sealed  the sealed Shamir shares (most of the state), written once when key sharing
                       closed; from then on `.state` leaves them out

While masked inputs are collected nothing is written per input: they are durable in the spool
(with their rows), and a restart in that phase rebuilds the accumulator by folding them again from
zero. Reading back takes the newer of `.state` and `.sum` by sequence number (unmask responses
arrive after the sum froze). `coordinator.secagg_round` drives the phases and calls this.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fedort.common.durable import atomic_write
from fedort.common.secagg.phases import Phase
from fedort.coordinator.privacy.secagg.server import SecAggServer
from fedort.coordinator.privacy.secagg.server_state import SecAggServerState

_INLINE = (Phase.ADVERTISE, Phase.SHARE_KEYS)  # phases whose shares may still change: kept in `.state`


class SecAggRecord:
    """Writes and reads the protocol state of the round `current()` names, under `lock` (the one that
    guards the `SecAggServer` against the fold thread and the RPCs)."""

    def __init__(self, directory: Path, lock: threading.Lock, current: Callable[[], tuple[SecAggServer, int]]) -> None:
        self.dir, self.lock, self.current = directory, lock, current
        self._seq, self._sealed_saved = 0, False  # `.sealed`: this round's is written (see write)
        self._changes = self._persisted = 0  # group commit of the protocol state (see persist)
        self._persisting = asyncio.Lock()

    def path(self, round: int, kind: str = "state") -> Path:
        return self.dir / f"round-{round:04d}.{kind}"

    def write(self, with_sum: bool = False) -> None:
        """Write the current protocol state (with the accumulator: `.sum`) atomically, now (blocking)."""
        with self.lock:
            server, round = self.current()
            self._seq += 1
            inline = server.phase in _INLINE
            if inline:  # shares may still change: `.sealed` is rewritten once they cannot
                self._sealed_saved = False
            sealed = None if inline or self._sealed_saved else server.state.sealed_bytes()
            state = server.dump(inline) if with_sum else server.state.to_bytes(inline)
        path = self.path(round, "sum" if with_sum else "state")
        path.parent.mkdir(parents=True, exist_ok=True)
        if sealed is not None:
            atomic_write(self.path(round, "sealed"), sealed)
            self._sealed_saved = True
        atomic_write(path, self._seq.to_bytes(8, "little") + state)

    async def persist(self, with_sum: bool = False) -> None:
        """Durable before this returns. Group commit: messages that arrive while a write is in flight
        are all covered by the next one (one write per burst, not one per client)."""
        if with_sum:
            await asyncio.to_thread(self.write, True)
            return
        self._changes += 1
        mine = self._changes
        async with self._persisting:
            if self._persisted >= mine:
                return  # a write that started after our change covered it
            covered = self._changes
            await asyncio.to_thread(self.write)
            self._persisted = covered

    def begin(self, round: int) -> None:
        """A fresh protocol state for `round` (already current): a failed earlier attempt's sum and shares
        are removed, then the state is written."""
        self.path(round, "sum").unlink(missing_ok=True)
        self.path(round, "sealed").unlink(missing_ok=True)
        self._sealed_saved = False
        self.write()

    def load(self, round: int) -> SecAggServer | None:
        """The newest recorded protocol state of `round` (None if none, or if it failed). Before masked-input
        collection closed nothing is summed yet: the spool replay folds every masked input again."""
        state_path, sum_path = self.path(round, "state"), self.path(round, "sum")
        if not state_path.is_file():
            return None
        state = state_path.read_bytes()
        seq = int.from_bytes(state[:8], "little")
        sealed_path = self.path(round, "sealed")
        sealed = sealed_path.read_bytes() if sealed_path.is_file() else None
        if sum_path.is_file():
            blob = sum_path.read_bytes()
            seq_sum, server = int.from_bytes(blob[:8], "little"), SecAggServer.load(blob[8:], sealed)
            if seq_sum < seq:  # later messages (unmask responses): newer state, the same frozen sum
                server = SecAggServer.restore(state[8:], server.accumulator, sealed)
            seq = max(seq, seq_sum)
        else:
            length = SecAggServerState.from_bytes(state[8:], sealed).params.length
            server = SecAggServer.restore(state[8:], np.zeros(length + 1, dtype=np.uint64), sealed)
        self._sealed_saved = sealed is not None and server.phase not in _INLINE
        if server.phase in (*_INLINE, Phase.MASKED_INPUT):
            server.state.u3 = []  # nothing summed yet, or the spool replay folds
            server.accumulator[:] = 0  # every masked input again
        self._seq = seq
        return None if server.phase is Phase.FAILED else server


__all__ = ["SecAggRecord"]
