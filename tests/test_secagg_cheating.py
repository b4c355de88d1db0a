"""coordinator.secagg_shares: a member that answers the unmask request with wrong shares (a foreign
index, a random value, a share off by one) is caught and its shares left out; the round unmasks the
exact sum from the honest shares, or, when no single share explains the disagreement, aborts with a
reason — never a silently wrong sum."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedort.coordinator.secagg_server import SecAggServer
from fedort.coordinator.secagg_shares import holder_index
from fedort.edge_client.secagg_client import SecAggClient
from fedort.protos.secagg import SecAggAborted
from fedort.protos.secagg.scheme import AES_PRIME
from fedort.protos.secagg.shamir_prime import PRIME, SHARE_BYTES
from secagg_support import make_params, quantized_sum

CHEAT = "c001"
VICTIM = "c002"


def _bump(share: tuple[int, bytes]) -> tuple[int, bytes]:
    index, value = share
    return index, ((int.from_bytes(value, "big") + 1) % PRIME).to_bytes(SHARE_BYTES, "big")


ATTACKS = {
    "a share off by one": lambda params, keys, share: _bump(share),
    "a random share": lambda params, keys, share: (share[0], (12345678901234567890).to_bytes(SHARE_BYTES, "big")),
    "another holder's index": lambda params, keys, share: (holder_index(params, keys, VICTIM, "c003"), share[1]),
}


def _round(n: int, attack, *, threshold: int | None = None, drop: tuple[str, ...] = ()):
    """A full in-process round of `n` clients (AES scheme) where CHEAT alters its share of VICTIM's seed."""
    params = make_params(n, 300, threshold=threshold, scheme=AES_PRIME)
    rng = np.random.default_rng(4)
    updates = {c: rng.normal(0.0, 0.3, params.length) for c in params.cohort}
    server = SecAggServer(params)
    clients = {c: SecAggClient(c, params) for c in params.cohort}
    for client in clients.values():
        server.receive_keys(client.advertise())
    server.close_advertise()
    for c in server.state.u1:
        server.receive_shares(clients[c].share_keys(server.roster_for(c)))
    server.close_share_keys()
    for c in server.state.u2:
        server.receive_masked_input(c, clients[c].masked_input(server.delivery_for(c), updates[c]))
    request = server.close_masked_input()
    for c in request.survivors:
        if c in drop:
            continue
        response = clients[c].unmask(request)
        if c == CHEAT:
            shares = dict(response.seed_shares)
            shares[VICTIM] = attack(params, server.state.keys, shares[VICTIM])
            response = dataclasses.replace(response, seed_shares=shares)
        server.receive_unmask(response)
    return params, updates, server


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_cheating_responder_is_left_out_and_the_sum_is_exact(attack):
    params, updates, server = _round(8, ATTACKS[attack])      # T = 4: 7 shares of each seed, 3 to spare
    result = server.finish()
    weighted, weight = params.fixed_point.decode_sum(quantized_sum(params, updates, params.cohort))
    assert np.array_equal(result.weighted_sum, weighted) and result.weight_sum == weight == 8.0


def test_a_wrong_share_with_one_to_spare_aborts_the_round_instead_of_a_wrong_sum():
    # 7 clients, T = 5: 6 shares of each seed, one to spare: the lie is seen, not who told it
    params, updates, server = _round(7, ATTACKS["a share off by one"], threshold=5)
    with pytest.raises(SecAggAborted, match="do not lie on one polynomial"):
        server.finish()
