"""Who sits out secure rounds: what a failed or finished protocol run taught about its members.

caught      the coordinator holds the proof (a share under another holder's index, a share that
            does not open its dealer's commitment, committed shares that do not rebuild the
            dealer's committed seed or advertised key): left out of every later attempt and
            every later round of the run; kept in STATE/secagg/excluded.json, so a restart
            keeps them out too.
accused     named by a neighbour whose bundle from it did not open or broke its commitments:
            the coordinator cannot tell which of the two lied, so it is left out of the round's
            later attempts only, and each accuser's first accusation (in id order) of an attempt
            counts: a lying accuser costs at most one honest device an attempt. An accuser caught
            itself accuses nobody.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from fedort.common.durable import atomic_write
from fedort.common.secagg.scheme import committed
from fedort.coordinator.privacy.secagg.server_state import SecAggServerState

log = logging.getLogger("fedort.coordinator.engine.round_engine")


class Exclusions:
    """The run's caught cheaters (durable in `path`) and the accused of the round in progress."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.caught: dict[str, str] = json.loads(path.read_bytes()) if path.is_file() else {}
        self._round, self.accused = 0, dict[str, str]()

    def excluded(self, round: int) -> frozenset[str]:
        """Who must not be selected for `round`'s next attempt."""
        return frozenset(self.caught) | (frozenset(self.accused) if round == self._round else frozenset())

    def learn(self, round: int, state: SecAggServerState) -> list[str]:
        """Take in an attempt's cheaters and complaints; the clients newly excluded, sorted."""
        if round != self._round:
            self._round, self.accused = round, {}
        before = self.excluded(round)
        fresh = {c: why for c, why in state.cheaters.items() if c not in self.caught}
        if not committed(state.params.scheme):  # without commitments a dealer could have framed a holder
            self.accused.update(fresh)
            fresh = {}
        for accuser, accused in sorted(state.complaints().items()):
            named = sorted(set(accused) - {accuser})
            if accuser not in state.cheaters and accuser not in self.caught and named:
                self.accused.setdefault(
                    named[0], f"its share bundle for {accuser} did not open or broke its commitments"
                )
        if fresh:
            self.caught.update(fresh)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(self.caught, sort_keys=True).encode())
        new = sorted(self.excluded(round) - before)
        for c in new:
            log.warning(
                "round %d: %s is left out of %s: %s",
                round,
                c,
                "the run's secure rounds" if c in self.caught else "this round's later attempts",
                self.caught.get(c) or self.accused[c],
            )
        return new


__all__ = ["Exclusions"]
