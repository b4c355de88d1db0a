"""coordinator.secagg_shares under the schemes before commitments (aes128ctr-p130, aes128ctr32-p130): a
member that answers the unmask request with wrong shares (a foreign index, a random value, a share off
by one) is caught and its shares left out; the round unmasks the exact sum from the honest shares, or,
when no single share explains the disagreement, aborts with a reason — never a silently wrong sum.
The committed scheme's attacks are in test_secagg_malicious.py."""

from __future__ import annotations

import asyncio
import dataclasses
import os

import numpy as np
import pytest

from coordinator_fixtures import P_MLP, mlp_artifacts, start_coordinator, stub_client  # noqa: F401 (fixtures)
from secagg_devices import deltas_for, run_devices

from fedort.coordinator.privacy.secagg.server import SecAggServer
from fedort.coordinator.privacy.secagg.share_checks import holder_indices
from fedort.edge_client.secagg.client import SecAggClient
from fedort.common.round_state import RoundState
from fedort.common.secagg import SecAggAborted
from fedort.common.secagg.messages import ShareKeys, UnmaskResponse
from fedort.common.secagg.scheme import AES_PRIME, AES_PRIME_W32, CAPABILITY
from fedort.common.secagg.shamir_prime import PRIME, SHARE_BYTES
from secagg_support import make_params, quantized_sum

PRE_COMMIT = {CAPABILITY: f"{AES_PRIME_W32},{AES_PRIME}"}  # a device before protocol 1.8
CHEAT = "c001"
VICTIM = "c002"


def _bump(share: tuple[int, bytes]) -> tuple[int, bytes]:
    index, value = share
    return index, ((int.from_bytes(value, "big") + 1) % PRIME).to_bytes(SHARE_BYTES, "big")


ATTACKS = {
    "a share off by one": lambda params, keys, share: _bump(share),
    "a random share": lambda params, keys, share: (share[0], (12345678901234567890).to_bytes(SHARE_BYTES, "big")),
    "another holder's index": lambda params, keys, share: (holder_indices(params, keys, VICTIM)["c003"], share[1]),
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


# ---- over gRPC: a member that seals garbage for its neighbours --------------------------------------

class GarbageShares:
    """A device's transport that replaces every sealed bundle it shares with random bytes."""

    def __init__(self, transport) -> None:
        self.transport = transport

    def __getattr__(self, name):
        return getattr(self.transport, name)

    def secagg_step(self, client_id, model_id, round, step, payload, wait_ms):
        if step == 1:   # SHARE
            shares = ShareKeys.from_bytes(payload)
            payload = ShareKeys(shares.client_id, {k: os.urandom(len(v)) for k, v in shares.sealed.items()}).to_bytes()
        return self.transport.secagg_step(client_id, model_id, round, step, payload, wait_ms)


@pytest.mark.slow
async def test_before_commitments_garbage_sealed_shares_end_the_attempt_for_honest_devices_and_the_round_is_retried(
        start_coordinator, stub_client):
    ids = [f"dev-{i}" for i in range(5)]
    coord = await start_coordinator(rounds=1, min_clients=4, min_available_clients=5, secagg=True, secagg_neighbours=4,
                                    secagg_threshold=3, round_timeout_s=10, max_round_attempts=2)
    deltas = deltas_for(ids, P_MLP, seed=6)
    honest = {c: deltas[c] for c in ids[1:]}
    old = {c: PRE_COMMIT for c in ids}
    cheater = asyncio.ensure_future(asyncio.to_thread(run_devices, coord.port, {ids[0]: deltas[ids[0]]}, None, None,
                                                      1, {ids[0]: GarbageShares}, old))   # one attempt, then it leaves
    outcomes = await asyncio.to_thread(run_devices, coord.port, honest, None, None, 1, None, old)
    for c in honest:                        # each honest device left the attempt (no exception, no exit 1)
        assert outcomes[c][0][0] == "stale" and "is unusable" in outcomes[c][0][1], outcomes[c]
    again = await asyncio.to_thread(run_devices, coord.port, honest, None, None, 1, None, old)   # attempt 2
    assert all(o == [("accepted", "accepted")] for o in again.values()), again
    await asyncio.wait_for(cheater, 120)
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    client = stub_client(coord.port)
    model = (await client.join(ids[1])).model_id
    _, start = await client.download_vector(ids[1], model, 1)
    _, final = await client.download_vector(ids[1], model, 2)
    mean = sum(np.rint(np.clip(deltas[c].astype(np.float64), -1, 1) * 10 * 65536.0) for c in honest) / 65536.0 / 40
    np.testing.assert_allclose(final, start.astype(np.float64) + mean, atol=1e-6)


class BumpedShare:
    """A device's transport that answers the unmask request with one survivor's seed share off by one."""

    def __init__(self, transport) -> None:
        self.transport = transport

    def __getattr__(self, name):
        return getattr(self.transport, name)

    def secagg_step(self, client_id, model_id, round, step, payload, wait_ms):
        if step == 3 and payload:   # UNMASK
            response = UnmaskResponse.from_bytes(payload)
            owner = sorted(response.seed_shares)[0]
            shares = {**response.seed_shares, owner: _bump(response.seed_shares[owner])}
            payload = dataclasses.replace(response, seed_shares=shares).to_bytes()
        return self.transport.secagg_step(client_id, model_id, round, step, payload, wait_ms)


async def test_over_grpc_before_commitments_a_bumped_seed_share_is_left_out_and_the_round_commits_the_exact_mean(start_coordinator,
                                                                                           stub_client):
    ids = [f"dev-{i}" for i in range(6)]           # 5 neighbours each, T = 3: two shares to spare per secret
    coord = await start_coordinator(rounds=1, min_clients=6, secagg=True, secagg_neighbours=5, secagg_threshold=3,
                                    round_timeout_s=30, max_round_attempts=1)
    deltas = deltas_for(ids, P_MLP, seed=8)
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas, None, None, 1, {ids[0]: BumpedShare},
                                       {c: PRE_COMMIT for c in ids})
    assert all(o == [("accepted", "accepted")] for o in outcomes.values()), outcomes
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    client = stub_client(coord.port)
    model = (await client.join(ids[1])).model_id
    _, start = await client.download_vector(ids[1], model, 1)
    _, final = await client.download_vector(ids[1], model, 2)
    mean = sum(np.rint(np.clip(deltas[c].astype(np.float64), -1, 1) * 10 * 65536.0) for c in ids) / 65536.0 / 60
    np.testing.assert_allclose(final, start.astype(np.float64) + mean, atol=1e-6)
