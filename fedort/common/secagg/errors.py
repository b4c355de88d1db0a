"""Errors of the secure-aggregation protocol, inside fedort's one exception tree.

ProtocolError
 +-- SecAggError          a peer sent something the protocol forbids      INVALID_ARGUMENT
      +-- SecAggAborted   the round cannot finish (too few survivors)     ABORTED
      +-- PeerShareError  a neighbour's sealed share does not open         INVALID_ARGUMENT
      +-- SchemeError     the device computes another mask/sharing scheme FAILED_PRECONDITION
"""

from __future__ import annotations

from fedort.common.errors import ProtocolError


class SecAggError(ProtocolError):
    """A message that breaks the protocol: wrong phase, bad ciphertext, contradictory request."""


class SecAggAborted(SecAggError):
    """Fewer than the threshold survived a phase: the round fails, the global model is unchanged."""

    code = "ABORTED"


class SchemeError(SecAggError):
    """The two sides would compute masks or shares differently (another mask PRG or Shamir field):
    the device cannot take part in this round; an older device needs an update."""

    code = "FAILED_PRECONDITION"


class PeerShareError(SecAggError):
    """A neighbour's sealed share bundle does not open or does not parse: that neighbour cheated (or the
    coordinator routed garbage). Under the committed scheme the device names the sender in its unmask
    response and stays; under the older ones it leaves this round instead of failing, its missing input
    handled as any dropout."""
