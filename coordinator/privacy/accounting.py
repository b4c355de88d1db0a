"""Privacy accounting for user-level DP-FedAvg with Google's `dp-accounting` (RDP accountant).

One round samples each of `population` clients with probability q = cohort / population and
releases the sum of clipped updates plus Gaussian noise of std z*C: in the accountant's terms a
PoissonSampledDpEvent(q, GaussianDpEvent(z)), composed once per round. `epsilon` returns the
epsilon of `rounds` such rounds at the given delta (add-or-remove-one-client adjacency, i.e.
user-level DP). The coordinator selects a fixed-size cohort, not a Poisson sample; like
McMahan et al. (2018) and TFF we account with the Poisson bound at the same q, which is an
approximation to state next to every reported epsilon.
"""

from __future__ import annotations

import logging
import math
from contextlib import contextmanager
from typing import TYPE_CHECKING

from fedort.common.errors import ConfigError

if TYPE_CHECKING:
    import dp_accounting

MAX_ROUNDS = 10**7


def round_event(q: float, z: float) -> dp_accounting.DpEvent:
    """The DpEvent of one round: Poisson sampling at rate q of the Gaussian mechanism with multiplier z."""
    import dp_accounting  # imported on first use: it pulls scipy, the coordinator should start without it

    return dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))


@contextmanager
def _quiet_absl():
    # the RDP accountant logs a warning per fractional order it cannot evaluate; not our news
    log = logging.getLogger("absl")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _check(q: float, z: float, delta: float) -> None:
    if not 0.0 < q <= 1.0:
        raise ConfigError(f"DP sampling rate (cohort / population) must be in (0, 1], got {q}")
    if not (z >= 0.0 and math.isfinite(z)):
        raise ConfigError(f"DP noise multiplier must be finite and >= 0, got {z}")
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"DP delta must be in (0, 1), got {delta}")


def epsilon(q: float, z: float, rounds: int, delta: float) -> float:
    """Epsilon after `rounds` rounds at `delta` (0 for no rounds, inf without noise)."""
    _check(q, z, delta)
    if rounds < 0:
        raise ConfigError(f"rounds must be >= 0, got {rounds}")
    if rounds == 0:
        return 0.0
    if z == 0.0:
        return math.inf
    from dp_accounting import rdp

    accountant = rdp.RdpAccountant()
    accountant.compose(round_event(q, z), rounds)
    with _quiet_absl():
        return float(accountant.get_epsilon(delta))


def rounds_within_budget(q: float, z: float, delta: float, target_eps: float) -> int:
    """The largest number of rounds whose epsilon stays <= `target_eps` (capped at MAX_ROUNDS)."""
    if not target_eps > 0:
        raise ConfigError(f"DP target epsilon must be > 0, got {target_eps}")
    if epsilon(q, z, 1, delta) > target_eps:
        return 0
    lo, hi = 1, 2
    while hi < MAX_ROUNDS and epsilon(q, z, hi, delta) <= target_eps:
        lo, hi = hi, hi * 2
    if hi >= MAX_ROUNDS and epsilon(q, z, MAX_ROUNDS, delta) <= target_eps:
        return MAX_ROUNDS
    while hi - lo > 1:  # epsilon(lo) <= target < epsilon(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if epsilon(q, z, mid, delta) <= target_eps else (lo, mid)
    return lo


def epsilon_for_rounds(rounds: list[tuple[float, float]], delta: float) -> float:
    """Epsilon after one round per (q, z) entry (each round's own sampling rate and noise multiplier)."""
    if not rounds:
        return 0.0
    for q, z in set(rounds):
        _check(q, z, delta)
    if any(z == 0.0 for _, z in rounds):
        return math.inf
    from dp_accounting import rdp

    accountant = rdp.RdpAccountant()
    for q, z in sorted(set(rounds)):
        accountant.compose(round_event(q, z), rounds.count((q, z)))
    with _quiet_absl():
        return float(accountant.get_epsilon(delta))
