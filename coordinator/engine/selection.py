"""Who trains in a round: how many clients, which ones (seeded), and each one's shuffling seed.

Pure functions, so a simulation or a test can predict the coordinator's choice: selection is
seeded by (run seed, round, attempt) over the sorted client ids, independent of the order in
which clients joined. `until_available` waits for a round's clients before the selection.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # a plain annotation: the config module needs nothing from here
    from fedort.coordinator.config import CoordinatorConfig
    from fedort.coordinator.engine.registry import ClientRegistry
    from fedort.coordinator.state.store import StateStore

log = logging.getLogger("fedort.coordinator.engine.round_engine")


def sample_size(available: int, fraction: float, min_clients: int) -> int:
    """How many of `available` clients a round selects: max(min_clients, ceil(fraction * available)), capped."""
    return min(available, max(min_clients, math.ceil(fraction * available)))


def select_clients(candidates: Sequence[str], k: int, seed: int, round: int, attempt: int) -> list[str]:
    """`k` of `candidates`, reproducibly: seeded by (seed, round, attempt) over the sorted ids."""
    pool = sorted(candidates)
    if k >= len(pool):
        return pool
    rng = np.random.default_rng([seed, round, attempt])
    return sorted(pool[i] for i in rng.choice(len(pool), size=k, replace=False))


def client_seed(seed: int, round: int, client_id: str) -> int:
    """The shuffling seed of one client in one round (stable across processes)."""
    digest = hashlib.sha256(f"{seed}:{round}:{client_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def attempt_selection(
    available: Iterable[str],
    reported: Iterable[str],
    config: CoordinatorConfig,
    round: int,
    attempt: int,
    excluded: AbstractSet[str] = frozenset(),
) -> tuple[frozenset[str], str]:
    """Attempt `attempt`'s selection: clients besides those that already `reported` (who stay selected),
    and why (for the transition's log). `excluded` clients (caught cheating) are never selected."""
    cfg, pool = config, set(available) - excluded
    candidates = sorted(pool - set(reported))
    keep = frozenset(reported)
    target = sample_size(len(pool | keep), cfg.plan.fraction, cfg.plan.min_clients)
    k = max(0, min(target - len(keep), len(candidates)))
    chosen = select_clients(candidates, k, cfg.plan.seed, round, attempt)
    why = (
        f"attempt {attempt}/{cfg.plan.max_round_attempts}: selected {len(chosen)} of {len(candidates)} "
        f"available clients"
        + (f", keeping {len(keep)} that reported" if keep else "")
        + f", deadline in {cfg.plan.round_timeout_s:g} s"
    )
    return frozenset(chosen) | keep, why


async def until_available(
    need: int, registry: ClientRegistry, store: StateStore, round: int, wait_change: Callable[[float], Awaitable[None]]
) -> None:
    """Until `need` clients are available; a deferred commit is flushed first, since it would otherwise wait too."""
    last_log = 0.0
    if store.deferred and len(registry.available()) < need:
        store.flush()
    while (n := len(registry.available())) < need:
        if time.monotonic() - last_log > 30:
            log.info("round %d: waiting for clients: %d of %d available", round, n, need)
            last_log = time.monotonic()
        await wait_change(1.0)
