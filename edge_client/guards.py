"""Checks on what a coordinator sends before the device acts on it or keeps it.

A global vector with NaN or Inf would otherwise be cached, trained on, and the failure blamed on
the learning rate several steps later; it is refused on arrival, naming the round.
"""

from __future__ import annotations

import numpy as np

from fedort.protos.errors import ProtocolError


def check_finite(vector: np.ndarray, round: int) -> None:
    """ProtocolError when the global vector of `round` holds a NaN or an infinity."""
    finite = np.isfinite(vector)
    if not finite.all():
        bad = int(finite.size - np.count_nonzero(finite))
        first = int(np.argmin(finite))
        raise ProtocolError(f"the coordinator's global vector of round {round} holds {bad} non-finite value(s) "
                            f"(first at index {first}: {vector[first]!r}); refusing to cache or train on it")


__all__ = ["check_finite"]
