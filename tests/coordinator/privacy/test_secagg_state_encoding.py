"""coordinator/privacy/secagg/server_state.py: the saved state always holds what the server holds now, though a
sender's bundles are encoded once and reused for every later write."""

from __future__ import annotations

from secagg_support import make_params

from fedort.common.secagg.scheme import COMMITTED
from fedort.coordinator.privacy.secagg.server_state import SecAggServerState


def test_a_senders_replaced_bundles_are_what_the_next_write_saves():
    state = SecAggServerState(make_params(6, 10, scheme=COMMITTED))
    state.sealed["c000"] = {"c001": b"first"}
    state.commitments["c000"] = {"c001": (b"k" * 32, b"s" * 32)}
    state.to_bytes()  # encodes (and keeps) c000's entries
    state.sealed["c000"] = {"c001": b"second", "c002": b"third"}
    state.commitments["c000"] = {"c001": (b"K" * 32, b"S" * 32)}
    back = SecAggServerState.from_bytes(state.to_bytes())
    assert back.sealed == {"c000": {"c001": b"second", "c002": b"third"}}
    assert back.commitments == {"c000": {"c001": (b"K" * 32, b"S" * 32)}}
    again = SecAggServerState.from_bytes(state.to_bytes(sealed=False), state.sealed_bytes())  # saved apart
    assert again.sealed == back.sealed and again.commitments == back.commitments
