"""Checks on vectors before the device acts on them, keeps them or lets them leave.

A global vector with NaN or Inf would otherwise be cached, trained on, and the failure blamed on
the learning rate several steps later; it is refused on arrival, naming the round. The checks go
block by block through one small scratch array (`all_finite`): a vector-sized temporary of booleans
would be fresh memory on every call (5 MB for 5 M values, mapped and zeroed by the kernel each time).
"""

from __future__ import annotations

import numpy as np

from fedort.protos.errors import ProtocolError

BLOCK = 1 << 16      # values checked per step: the scratch array stays in the CPU's cache


def all_finite(vector: np.ndarray) -> bool:
    """`np.isfinite(vector).all()`, without a temporary as large as the vector."""
    flat = vector.reshape(-1)
    scratch = np.empty(min(BLOCK, flat.size), dtype=bool)
    for start in range(0, flat.size, BLOCK):
        block = flat[start:start + BLOCK]
        if not np.isfinite(block, out=scratch[:block.size]).all():
            return False
    return True


def check_finite(vector: np.ndarray, round: int) -> None:
    """ProtocolError when the global vector of `round` holds a NaN or an infinity."""
    if all_finite(vector):
        return
    finite = np.isfinite(vector)
    bad = int(finite.size - np.count_nonzero(finite))
    first = int(np.argmin(finite))
    raise ProtocolError(f"the coordinator's global vector of round {round} holds {bad} non-finite value(s) "
                        f"(first at index {first}: {vector[first]!r}); refusing to cache or train on it")


__all__ = ["all_finite", "check_finite"]
