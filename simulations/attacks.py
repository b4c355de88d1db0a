"""Byzantine clients for simulations: how a malicious client corrupts its update, and who is malicious.

An attack is an `UpdateHook` (edge_client.local_round): it takes the round's global vector g and
the honestly trained vector v and returns what the client uploads instead. The simulation gives
it to a seeded share of its virtual clients (`byzantine_fraction`); everything else — the
protocol, the coordinator's checks — is unchanged, as with a real compromised device.

| spec | uploads | what it models |
| --- | --- | --- |
| `sign-flip[:K]` | g − K·(v − g), K = 4 by default | an update pushed against the descent direction; with 20 % attackers and K = 4 it cancels the honest mean |
| `scale:K` | g + K·(v − g) | a boosted update (model replacement); e.g. `scale:10` |
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedort.common.errors import ConfigError

ATTACKS = "sign-flip[:K] | scale:K"
SIGN_FLIP_DEFAULT = 4.0


@dataclass(frozen=True)
class Attack:
    """g + factor·(v − g): factor < 0 flips the update's sign, |factor| > 1 scales it (picklable)."""

    spec: str
    factor: float

    def __call__(self, task: Any, global_vector: np.ndarray, local_vector: np.ndarray) -> np.ndarray:
        delta = np.subtract(local_vector, global_vector, dtype=np.float64)
        delta *= self.factor
        delta += global_vector
        return delta.astype(np.float32)


def parse_attack(spec: str) -> Attack:
    """The attack a spec names (see the module table); ConfigError says what was expected."""
    if not isinstance(spec, str):
        raise ConfigError(f"attack must be a string ({ATTACKS}), got {spec!r}")
    name, *args = spec.strip().lower().split(":")
    if name not in ("sign-flip", "scale"):
        raise ConfigError(f"unknown attack {spec!r}; expected {ATTACKS}")
    if len(args) > 1 or (name == "scale" and len(args) != 1):
        raise ConfigError(f"attack {spec!r}: expected {'scale:K' if name == 'scale' else 'sign-flip or sign-flip:K'}")
    k = SIGN_FLIP_DEFAULT
    if args:
        try:
            k = float(args[0])
        except ValueError:
            raise ConfigError(f"attack {spec!r}: K must be a number, got {args[0]!r}") from None
        if not (math.isfinite(k) and k > 0):
            raise ConfigError(f"attack {spec!r}: K must be a finite number > 0, got {args[0]!r}")
    return Attack(spec, -k if name == "sign-flip" else k)


def choose_attackers(client_ids: Sequence[str], fraction: float, seed: int) -> frozenset[str]:
    """round(fraction · n) of the clients, drawn with their own seeded stream (reproducible per seed)."""
    from fedort.simulations.population import choose_share

    if not 0 <= fraction < 1:
        raise ConfigError(f"byzantine_fraction must be in [0, 1), got {fraction}")
    return choose_share(client_ids, fraction, seed, 0xB12)


__all__ = ["ATTACKS", "Attack", "choose_attackers", "parse_attack"]
