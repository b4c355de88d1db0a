"""The committed scheme in process (coordinator/privacy/secagg/server.py, share_checks.py, edge client):
every revealed share is checked against its dealer's commitment and every rebuilt seed against its
digest, so a lying holder is caught even with no share to spare, a lying dealer is named, and a
holder handed shares off their commitments reports the dealer instead of being framed by it."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from secagg_support import make_params, quantized_sum, run_round

from fedort.common.secagg import SecAggAborted, SecAggError
from fedort.common.secagg.scheme import COMMITTED
from fedort.common.secagg.shamir_prime import PRIME, SHARE_BYTES
from fedort.coordinator.privacy.secagg.server import SecAggServer
from fedort.edge_client.secagg.client import SecAggClient

CHEAT, VICTIM = "c001", "c002"


def _bump(share):
    index, value = share
    return index, ((int.from_bytes(value, "big") + 1) % PRIME).to_bytes(SHARE_BYTES, "big")


def _round(n, *, threshold=None, degree=None, shares=None, response=None, params=None):
    """A round of `n` clients under the committed scheme; CHEAT's ShareKeys pass through `shares`, its
    UnmaskResponse through `response`. (params, updates, server, clients), unmask responses in."""
    params = params or make_params(n, 300, degree=degree, threshold=threshold, scheme=COMMITTED)
    rng = np.random.default_rng(5)
    updates = {c: rng.normal(0.0, 0.3, params.length) for c in params.cohort}
    server = SecAggServer(params)
    clients = {c: SecAggClient(c, params) for c in params.cohort}
    for client in clients.values():
        server.receive_keys(client.advertise())
    server.close_advertise()
    for c in server.state.u1:
        msg = clients[c].share_keys(server.roster_for(c))
        server.receive_shares(shares(msg) if c == CHEAT and shares else msg)
    server.close_share_keys()
    for c in server.state.u2:
        server.receive_masked_input(c, clients[c].masked_input(server.delivery_for(c), updates[c]))
    request = server.close_masked_input()
    for c in request.survivors:
        r = clients[c].unmask(request)
        server.receive_unmask(response(r) if c == CHEAT and response else r)
    return params, updates, server, clients


def _exact(params, updates, result):
    weighted, weight = params.fixed_point.decode_sum(quantized_sum(params, updates, params.cohort))
    return np.array_equal(result.weighted_sum, weighted) and result.weight_sum == weight


def _bumped_seed_share(r):
    return dataclasses.replace(r, seed_shares={**r.seed_shares, VICTIM: _bump(r.seed_shares[VICTIM])})


def test_a_round_under_the_committed_scheme_sums_exactly_across_restarts():
    params = make_params(6, 500, degree=4, scheme=COMMITTED)
    rng = np.random.default_rng(1)
    updates = {c: rng.normal(0.0, 0.3, params.length) for c in params.cohort}
    result = run_round(params, updates, drop_before_upload=["c004"], reload=True)
    weighted, weight = params.fixed_point.decode_sum(quantized_sum(params, updates, [c for c in params.cohort if c != "c004"]))
    assert np.array_equal(result.weighted_sum, weighted) and result.weight_sum == weight


def test_a_share_off_by_one_is_caught_with_a_spare_share_and_the_sum_is_exact():
    params, updates, server, _ = _round(5, threshold=3, response=_bumped_seed_share)  # 4 shares, T = 3
    result = server.finish()
    assert _exact(params, updates, result) and set(result.cheaters) == {CHEAT}


def test_a_share_off_by_one_with_no_share_to_spare_names_its_holder_and_aborts():
    params, updates, server, _ = _round(5, threshold=4, response=_bumped_seed_share)  # 4 shares, T = 4
    with pytest.raises(SecAggAborted, match=r"3 trusted shares of c0\d\d's self-mask seed arrived, 4 needed"):
        server.finish()
    assert set(server.state.cheaters) == {CHEAT} and "does not open" in server.state.cheaters[CHEAT]


def test_a_revealed_share_without_its_salt_is_caught():
    params, updates, server, _ = _round(5, threshold=3, response=lambda r: dataclasses.replace(r, salts={}))
    result = server.finish()
    assert _exact(params, updates, result) and set(result.cheaters) == {CHEAT}


def test_a_dealer_whose_seed_digest_is_not_of_its_seed_is_named_and_the_round_aborts():
    def wrong_digest(msg):
        return dataclasses.replace(msg, seed_digest=os.urandom(32))

    params, updates, server, _ = _round(5, threshold=3, shares=wrong_digest)
    with pytest.raises(SecAggAborted, match=f"rebuilt for {CHEAT} does not match its commitment"):
        server.finish()
    assert set(server.state.cheaters) == {CHEAT}


def test_a_holder_handed_a_share_off_its_commitment_reports_the_dealer_and_the_sum_is_exact():
    def off_commitment(msg):  # CHEAT commits to something else than it sealed for VICTIM
        ck, cb = msg.commitments[VICTIM]
        return dataclasses.replace(msg, commitments={**msg.commitments, VICTIM: (ck, os.urandom(32))})

    params, updates, server, _ = _round(5, threshold=3, shares=off_commitment)
    assert server.state.responses[VICTIM].complaints == (CHEAT,)
    assert CHEAT not in server.state.responses[VICTIM].seed_shares  # nothing revealed of the accused
    result = server.finish()  # VICTIM is not framed: the other 3 holders' shares of CHEAT suffice
    assert _exact(params, updates, result) and result.cheaters == {}


def test_shares_without_commitments_are_refused_under_the_committed_scheme():
    params = make_params(3, 10, scheme=COMMITTED)
    server = SecAggServer(params)
    clients = {c: SecAggClient(c, params) for c in params.cohort}
    for client in clients.values():
        server.receive_keys(client.advertise())
    server.close_advertise()
    msg = clients["c000"].share_keys(server.roster_for("c000"))
    with pytest.raises(SecAggError, match="must commit to its shares"):
        server.receive_shares(dataclasses.replace(msg, commitments={}, seed_digest=b""))


def test_a_complaint_about_a_client_that_sealed_nothing_for_the_accuser_is_refused():
    params = make_params(8, 300, degree=4, scheme=COMMITTED)
    stranger = next(c for c in params.cohort if c != CHEAT and c not in params.neighbours[CHEAT])
    with pytest.raises(SecAggError, match=f"complains about \\['{stranger}'\\]"):
        _round(8, params=params, response=lambda r: dataclasses.replace(r, complaints=(stranger,)))


def test_a_revealed_share_of_the_wrong_length_is_refused_as_a_message_not_a_crash():
    short = lambda r: dataclasses.replace(r, seed_shares={VICTIM: (r.seed_shares[VICTIM][0], b"\x01")})  # noqa: E731
    with pytest.raises(SecAggError, match="not \\(index 1..5, 17 bytes\\)"):
        _round(5, threshold=3, response=short)

