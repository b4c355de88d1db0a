"""Errors of the secure-aggregation protocol, inside fedort's one exception tree.

    ProtocolError
     +-- SecAggError          a peer sent something the protocol forbids      INVALID_ARGUMENT
          +-- SecAggAborted   the round cannot finish (too few survivors)     ABORTED
"""

from __future__ import annotations

from fedort.protos.errors import ProtocolError


class SecAggError(ProtocolError):
    """A message that breaks the protocol: wrong phase, bad ciphertext, contradictory request."""


class SecAggAborted(SecAggError):
    """Fewer than the threshold survived a phase: the round fails, the global model is unchanged."""

    code = "ABORTED"
