"""Checks on vectors before the device acts on them, keeps them or lets them leave.

A global vector with NaN or Inf would otherwise be cached, trained on, and the failure blamed on
the learning rate several steps later; it is refused on arrival, naming the round. The checks go
block by block through one small scratch array (protos.codecs.base.first_non_finite): a vector-sized
temporary of booleans would be fresh memory on every call (5 MB for 5 M values, mapped and zeroed by
the kernel each time).
"""

from __future__ import annotations

import numpy as np

from fedort.common.errors import ProtocolError
from fedort.protos.update_codecs.base import FINITE_STEP, first_non_finite

BLOCK = FINITE_STEP  # values checked per step (protos.codecs.base.first_non_finite)


def all_finite(vector: np.ndarray) -> bool:
    """`np.isfinite(vector).all()`, without a temporary as large as the vector."""
    return first_non_finite(vector) is None


def check_finite(vector: np.ndarray, round: int) -> None:
    """ProtocolError when the global vector of `round` holds a NaN or an infinity."""
    first = first_non_finite(vector)
    if first is None:
        return
    bad = int(vector.size - np.count_nonzero(np.isfinite(vector)))
    raise ProtocolError(
        f"the coordinator's global vector of round {round} holds {bad} non-finite value(s) "
        f"(first at index {first}: {vector.reshape(-1)[first]!r}); refusing to cache or train on it"
    )


__all__ = ["all_finite", "check_finite"]
