"""A secure round with one malicious member, over real gRPC (scheme aes128ctr32-p130-commit): the
member is an honest edge client whose transport alters what it sends. Each attack ends with the
exact aggregate (the cheater's shares left out) or a clean abort and a retried attempt without the
cheater that commits the exact mean of the honest devices; honest devices end every attempt normally."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os

import numpy as np
import pytest

from coordinator_fixtures import P_MLP, mlp_artifacts, start_coordinator, stub_client  # noqa: F401 (fixtures)
from secagg_devices import deltas_for, run_devices

from fedort.common.round_state import RoundState
from fedort.common.secagg.messages import ShareKeys, UnmaskResponse
from fedort.common.secagg.shamir_prime import PRIME, SHARE_BYTES

SHARE, UNMASK = 1, 3  # SecAggRequest.Step
CHEAT = "dev-0"


class Altering:
    """A device's transport that rewrites the payload of one protocol step before sending it."""

    step = -1

    def __init__(self, transport) -> None:
        self.transport = transport

    def __getattr__(self, name):
        return getattr(self.transport, name)

    def alter(self, payload: bytes) -> bytes:
        raise NotImplementedError

    def secagg_step(self, client_id, model_id, round, step, payload, wait_ms):
        if step == self.step and payload:
            payload = self.alter(payload)
        return self.transport.secagg_step(client_id, model_id, round, step, payload, wait_ms)


class GarbageBundles(Altering):
    """Seals random bytes for every neighbour (its commitments stay as computed)."""

    step = SHARE

    def alter(self, payload):
        m = ShareKeys.from_bytes(payload)
        return dataclasses.replace(m, sealed={k: os.urandom(len(v)) for k, v in m.sealed.items()}).to_bytes()


class FramingCommitments(GarbageBundles):
    """Seals honest shares but commits to other values for its first holder (to have it blamed later)."""

    def alter(self, payload):
        m = ShareKeys.from_bytes(payload)
        victim = sorted(m.commitments)[0]
        return dataclasses.replace(m, commitments={**m.commitments, victim: (os.urandom(32), os.urandom(32))}).to_bytes()


def _bump(share):
    index, value = share
    return index, ((int.from_bytes(value, "big") + 1) % PRIME).to_bytes(SHARE_BYTES, "big")


class UnmaskLie(Altering):
    """Answers the unmask request with one share altered by `lie(share)` (a seed share, or a key share)."""

    step, kind = UNMASK, "seed_shares"

    @staticmethod
    def lie(share):
        return _bump(share)

    def alter(self, payload):
        r = UnmaskResponse.from_bytes(payload)
        shares = dict(getattr(r, self.kind))
        owner = sorted(shares)[0]
        shares[owner] = self.lie(shares[owner])
        return dataclasses.replace(r, **{self.kind: shares}).to_bytes()


class ForeignIndex(UnmaskLie):
    @staticmethod
    def lie(share):
        return share[0] % 5 + 1, share[1]  # another holder's index (rosters of 5 here)


class RandomShare(UnmaskLie):
    @staticmethod
    def lie(share):
        return share[0], int.from_bytes(os.urandom(16), "big").to_bytes(SHARE_BYTES, "big")


class BumpedKeyShare(UnmaskLie):
    kind = "key_shares"


def _mean(deltas, ids):
    """The committed change of the global vector: FedAvg (10 examples each) of the fixed-point deltas."""
    total = sum(np.rint(np.clip(deltas[c].astype(np.float64), -1, 1) * 10 * 65536.0) for c in ids)
    return total / 65536.0 / (10 * len(ids))


async def _moved(coord, stub_client, ids, round=1):
    """(global before, global after) round `round`."""
    client = stub_client(coord.port)
    model = (await client.join(ids[1])).model_id
    _, start = await client.download_vector(ids[1], model, round)
    _, final = await client.download_vector(ids[1], model, round + 1)
    return start.astype(np.float64), final


def _ended_normally(outcomes):
    """An aborted attempt, as an honest device sees it: its input accepted, or the attempt ABORTED (no error)."""
    return len(outcomes) == 1 and (outcomes[0] == ("accepted", "accepted") or outcomes[0][1].startswith("ABORTED"))


def _params(coord, round=1):
    state = (coord.config.state_dir / "secagg" / f"round-{round:04d}.state").read_bytes()[8:]
    return json.loads(state)["params"]


def _excluded(coord):
    return json.loads((coord.config.state_dir / "secagg" / "excluded.json").read_bytes())


async def _lying_round(start_coordinator, stub_client, wrap, *, n=6, drops=None, **config):
    """One round of `n` devices (5 neighbours each, T = 3 by default) with CHEAT behind `wrap`; honest outcomes."""
    ids = [f"dev-{i}" for i in range(n)]
    config = {"secagg_neighbours": 5, "secagg_threshold": 3, "max_round_attempts": 1, "round_timeout_s": 20, **config}
    coord = await start_coordinator(rounds=1, min_clients=n, secagg=True, **config)
    deltas = deltas_for(ids, P_MLP, seed=8)
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas, drops, None, 1, {CHEAT: wrap})
    return coord, ids, deltas, outcomes


async def _assert_exact_with_the_cheater_caught(coord, stub_client, ids, deltas, outcomes, counted):
    for c in counted:
        assert outcomes[c] == [("accepted", "accepted")], outcomes
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    start, final = await _moved(coord, stub_client, ids)
    np.testing.assert_allclose(final, start + _mean(deltas, counted), atol=1e-6)
    assert CHEAT in _excluded(coord)  # caught with proof: not selected again in this run


async def test_a_seed_share_off_by_one_is_caught_by_its_commitment_and_the_sum_is_exact(start_coordinator, stub_client):
    coord, ids, deltas, outcomes = await _lying_round(start_coordinator, stub_client, UnmaskLie)
    await _assert_exact_with_the_cheater_caught(coord, stub_client, ids, deltas, outcomes, ids)


async def test_a_random_seed_share_is_caught_by_its_commitment_and_the_sum_is_exact(start_coordinator, stub_client):
    coord, ids, deltas, outcomes = await _lying_round(start_coordinator, stub_client, RandomShare)
    await _assert_exact_with_the_cheater_caught(coord, stub_client, ids, deltas, outcomes, ids)


async def test_a_share_under_another_holders_index_is_caught_and_the_sum_is_exact(start_coordinator, stub_client):
    coord, ids, deltas, outcomes = await _lying_round(start_coordinator, stub_client, ForeignIndex)
    await _assert_exact_with_the_cheater_caught(coord, stub_client, ids, deltas, outcomes, ids)


@pytest.mark.slow
async def test_a_key_share_off_by_one_of_a_dropped_device_is_caught_and_the_survivors_sum_is_exact(
    start_coordinator, stub_client
):
    # dev-5 shares its keys, then vanishes before its upload: its mask key is rebuilt from key shares
    coord, ids, deltas, outcomes = await _lying_round(
        start_coordinator, stub_client, BumpedKeyShare, n=7, drops={"dev-5": "upload"}, secagg_neighbours=6, secagg_threshold=4,
        round_timeout_s=8,
    )
    assert outcomes["dev-5"][0][0] == "vanished"
    survivors = [c for c in ids if c != "dev-5"]
    await _assert_exact_with_the_cheater_caught(coord, stub_client, ids, deltas, outcomes, survivors)


async def test_a_seed_share_off_by_one_without_a_spare_share_aborts_cleanly_and_the_retry_without_the_cheater_commits(
    start_coordinator, stub_client
):
    ids = [f"dev-{i}" for i in range(7)]  # 4 neighbours each, T = 4: no share to spare
    coord = await start_coordinator(rounds=1, min_clients=6, min_available_clients=7, secagg=True, secagg_neighbours=4,
                                    secagg_threshold=4, round_timeout_s=20, max_round_attempts=2)
    deltas = deltas_for(ids, P_MLP, seed=9)
    honest = {c: deltas[c] for c in ids[1:]}
    cheater = asyncio.ensure_future(
        asyncio.to_thread(run_devices, coord.port, {CHEAT: deltas[CHEAT]}, None, None, 1, {CHEAT: UnmaskLie})
    )
    first = await asyncio.to_thread(run_devices, coord.port, honest)  # attempt 1 ends for them normally
    assert all(_ended_normally(o) for o in first.values()), first
    again = await asyncio.to_thread(run_devices, coord.port, honest)  # attempt 2, without the cheater
    assert all(o == [("accepted", "accepted")] for o in again.values()), again
    await asyncio.wait_for(cheater, 120)
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    assert _params(coord)["round_id"] == 1002 and CHEAT not in _params(coord)["cohort"]
    start, final = await _moved(coord, stub_client, ids)
    np.testing.assert_allclose(final, start + _mean(deltas, list(honest)), atol=1e-6)


async def test_garbage_sealed_shares_are_reported_and_the_retry_without_their_sender_commits_the_honest_mean(
    start_coordinator, stub_client
):
    ids = [f"dev-{i}" for i in range(5)]
    coord = await start_coordinator(rounds=1, min_clients=4, min_available_clients=5, secagg=True, secagg_neighbours=4,
                                    secagg_threshold=3, round_timeout_s=20, max_round_attempts=2)
    deltas = deltas_for(ids, P_MLP, seed=6)
    honest = {c: deltas[c] for c in ids[1:]}
    cheater = asyncio.ensure_future(
        asyncio.to_thread(run_devices, coord.port, {CHEAT: deltas[CHEAT]}, None, None, 1, {CHEAT: GarbageBundles})
    )
    first = await asyncio.to_thread(run_devices, coord.port, honest)  # they stay in and name the sender
    assert all(_ended_normally(o) for o in first.values()), first
    again = await asyncio.to_thread(run_devices, coord.port, honest)
    assert all(o == [("accepted", "accepted")] for o in again.values()), again
    await asyncio.wait_for(cheater, 120)
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    assert _params(coord)["round_id"] == 1002 and CHEAT not in _params(coord)["cohort"]
    start, final = await _moved(coord, stub_client, ids)
    np.testing.assert_allclose(final, start + _mean(deltas, list(honest)), atol=1e-6)


async def test_a_caught_cheater_is_not_selected_for_the_runs_next_round(start_coordinator, stub_client):
    ids = [f"dev-{i}" for i in range(6)]
    coord = await start_coordinator(rounds=2, min_clients=5, min_available_clients=6, secagg=True, secagg_neighbours=5, secagg_threshold=3,
                                    round_timeout_s=20, max_round_attempts=1)
    deltas = deltas_for(ids, P_MLP, seed=10)
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas, None, None, 2, {CHEAT: ForeignIndex})
    assert outcomes[CHEAT] == [("accepted", "accepted")]  # round 1 only; then the run ends without it
    assert all(o == [("accepted", "accepted")] * 2 for c, o in outcomes.items() if c != CHEAT), outcomes
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    assert sorted(_params(coord, 2)["cohort"]) == ids[1:]


async def test_a_dealer_committing_to_other_shares_than_it_sealed_cannot_frame_their_holder(start_coordinator,
                                                                                          stub_client):
    coord, ids, deltas, outcomes = await _lying_round(start_coordinator, stub_client, FramingCommitments)
    assert all(o == [("accepted", "accepted")] for o in outcomes.values()), outcomes
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    start, final = await _moved(coord, stub_client, ids)  # the holder reported it and revealed nothing of it
    np.testing.assert_allclose(final, start + _mean(deltas, ids), atol=1e-6)
    assert not (coord.config.state_dir / "secagg" / "excluded.json").exists()  # nobody was caught with proof
