"""Masks expanded before the share delivery (SecAggClient.precompute_masks): the same y, U2 respected."""

from __future__ import annotations

import asyncio
import copy
import threading

import numpy as np
import pytest

from fedort.coordinator import RoundState
from fedort.coordinator.privacy.secagg.server import SecAggServer
from fedort.edge_client.secagg.ahead import MaskAhead
from fedort.edge_client.secagg.client import SecAggClient
from fedort.common.secagg.masks import add_signed, pairwise_mask, pairwise_sign, self_mask
from fedort.common.secagg.prg import accumulator_dtype
from fedort.common.secagg.scheme import SUPPORTED
from coordinator_fixtures import P_MLP, mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from secagg_devices import deltas_for, run_devices
from secagg_support import make_params, quantized_sum, run_round, through_share_keys


@pytest.mark.parametrize("scheme", SUPPORTED)
def test_precomputed_masks_give_the_same_masked_bytes_as_masks_computed_on_delivery(scheme):
    params = make_params(8, 2001, degree=4, scheme=scheme)
    me = params.cohort[0]
    gone = params.neighbours[me][0]                      # in my roster, missing from U2
    server, clients = through_share_keys(params, {gone})
    delivery = server.delivery_for(me)
    assert gone in server.roster_for(me).keys and gone not in delivery.sealed
    ahead = copy.copy(clients[me])                       # the same secrets and roster
    ahead.precompute_masks()
    x = np.random.default_rng(5).normal(0.0, 0.3, params.length)
    on_delivery = clients[me].masked_input(delivery, x, 0.75)
    precomputed = ahead.masked_input(delivery, x, 0.75)
    assert precomputed.dtype == on_delivery.dtype == np.uint64
    assert precomputed.tobytes() == on_delivery.tobytes()


@pytest.mark.parametrize("scheme", SUPPORTED)
def test_masked_words_are_the_masked_input_in_the_mask_accumulators_words(scheme):
    params = make_params(8, 2001, degree=4, scheme=scheme)
    me = params.cohort[2]
    server, clients = through_share_keys(params, set())
    twin = copy.copy(clients[me])
    x = np.random.default_rng(6).normal(0.0, 0.3, params.length)
    words = clients[me].masked_words(server.delivery_for(me), x, 0.5)
    assert words.dtype == accumulator_dtype(scheme, params.fixed_point.bits)
    assert np.array_equal(words.astype(np.uint64), twin.masked_input(server.delivery_for(me), x, 0.5))


@pytest.mark.parametrize("precompute", [False, True])
@pytest.mark.parametrize("scheme", SUPPORTED)
def test_y_is_the_update_plus_the_self_mask_and_the_masks_of_neighbours_in_u2(scheme, precompute):
    """y = x + PRG(b_u) + Σ_{v ∈ N(u) ∩ U2} sign(u, v)·PRG(s_uv) mod 2^b (masks.py), from the full-length
    masks of `masks.self_mask`/`pairwise_mask` (the client's own secrets), whatever accumulator it sums in."""
    params = make_params(8, 3001, degree=4, scheme=scheme)
    me = params.cohort[1]
    gone = params.neighbours[me][-1]
    server, clients = through_share_keys(params, {gone})
    delivery, client = server.delivery_for(me), clients[me]
    if precompute:
        client.precompute_masks()
    x = np.random.default_rng(8).normal(0.0, 0.3, params.length)
    y = client.masked_input(delivery, x, 0.5)
    expected = params.fixed_point.encode(x, 0.5) + self_mask(params, client._seed)
    for v in sorted(delivery.sealed):
        peer = server.roster_for(me).keys[v].mask_public
        add_signed(expected, pairwise_mask(params, client._mask.private, peer, me, v), pairwise_sign(me, v))
    assert gone not in delivery.sealed
    assert y.tobytes() == (expected & params.fixed_point.modulus_mask).tobytes()


@pytest.mark.parametrize("scheme", SUPPORTED)
def test_a_neighbour_that_never_shared_keys_leaves_no_mask_in_a_precomputed_input(scheme):
    """Its pairwise mask was expanded from the roster; were it still in y, nothing would remove it
    (it is in no unmask request) and the sum would not decode to the survivors' exact sum."""
    params = make_params(12, 700, degree=6, scheme=scheme)
    rng = np.random.default_rng(6)
    updates = {c: rng.normal(0.0, 0.3, params.length) for c in params.cohort}
    missing = params.cohort[2:4]
    result = run_round(params, updates, drop_before_shares=missing, precompute=params.cohort)
    survivors = [c for c in params.cohort if c not in missing]
    weighted, weight = params.fixed_point.decode_sum(quantized_sum(params, updates, survivors))
    assert np.array_equal(result.weighted_sum, weighted) and weight == len(survivors)
    assert sorted(result.survivors) == survivors


def test_precomputed_and_on_delivery_clients_mix_in_one_round_with_dropouts():
    params = make_params(10, 500, scheme=SUPPORTED[0])
    rng = np.random.default_rng(7)
    updates = {c: rng.normal(0.0, 0.3, params.length) for c in params.cohort}
    result = run_round(params, updates, drop_before_shares=params.cohort[:1], drop_before_upload=params.cohort[1:2],
                       drop_before_unmask=params.cohort[2:3], precompute=params.cohort[::2])
    counted = [c for c in params.cohort if c not in params.cohort[:2]]
    weighted, _ = params.fixed_point.decode_sum(quantized_sum(params, updates, counted))
    assert np.array_equal(result.weighted_sum, weighted)


def test_masks_are_precomputed_only_after_the_roster_was_checked():
    params = make_params(4, 10)
    client = SecAggClient(params.cohort[0], params)
    client.advertise()
    with pytest.raises(Exception, match="expected phase masked_input, in share_keys"):
        client.precompute_masks()


@pytest.mark.parametrize("shares", [True, False])
def test_a_neighbour_whose_mask_key_is_refused_fails_the_input_only_if_it_is_in_u2_as_before(shares):
    """An all-zero X25519 mask key (a small-order point) cannot be agreed with: on delivery that is an
    error if the neighbour shared keys, and nothing if it did not; precomputing changes neither. (The
    coordinator refuses such a key when it is advertised; here the roster carries one anyway, as a
    coordinator without that check would relay it.)"""
    from dataclasses import replace

    from fedort.common.secagg import SecAggError

    params = make_params(8, 500, degree=4, scheme=SUPPORTED[0])
    me = params.cohort[0]
    bad = params.neighbours[me][0]
    server = SecAggServer(params)
    clients = {c: SecAggClient(c, params) for c in params.cohort}
    for c, client in clients.items():
        keys = client.advertise()
        server.receive_keys(keys)
        if c == bad:
            server.state.keys[c] = replace(keys, mask_public=bytes(32))
    server.close_advertise()
    for c in params.cohort:
        msg = clients[c].share_keys(server.roster_for(c))
        if c != bad or shares:
            server.receive_shares(msg)
    server.close_share_keys()
    delivery, x = server.delivery_for(me), np.zeros(params.length)
    twin = copy.copy(clients[me])
    assert twin.precompute_masks() is True
    if shares:
        for client in (clients[me], twin):
            with pytest.raises(SecAggError, match="X25519 key agreement refused"):
                client.masked_input(delivery, x)
    else:
        assert clients[me].masked_input(delivery, x).tobytes() == twin.masked_input(delivery, x).tobytes()


def _mask_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("secagg-masks-")]


def test_a_cancelled_precomputation_keeps_nothing_and_y_is_computed_on_delivery():
    params = make_params(6, 1000, scheme=SUPPORTED[0])
    server, clients = through_share_keys(params)
    me = params.cohort[0]
    twin = copy.copy(clients[me])
    assert clients[me].precompute_masks(lambda: True) is False
    x = np.random.default_rng(9).normal(0.0, 0.3, params.length)
    delivery = server.delivery_for(me)
    assert clients[me].masked_input(delivery, x).tobytes() == twin.masked_input(delivery, x).tobytes()


def test_masks_expanded_in_the_thread_are_used_once_the_wait_is_over():
    params = make_params(6, 1000, scheme=SUPPORTED[0])
    server, clients = through_share_keys(params)
    me = params.cohort[0]
    twin = copy.copy(clients[me])
    with MaskAhead(clients[me]) as ahead:
        delivery = server.delivery_for(me)
    assert ahead.finished and not ahead.thread.is_alive()
    x = np.random.default_rng(10).normal(0.0, 0.3, params.length)
    assert clients[me].masked_input(delivery, x).tobytes() == twin.masked_input(delivery, x).tobytes()


@pytest.mark.slow
def test_a_wait_that_fails_stops_and_joins_the_mask_thread():
    """Big masks, so the wait usually fails while they are being expanded; either way the thread is
    gone when the block is left, and what it left behind (nothing, or every mask) gives the same y."""
    params = make_params(10, 2_000_000, scheme=SUPPORTED[0])
    server, clients = through_share_keys(params)
    me = params.cohort[0]
    twin = copy.copy(clients[me])
    with pytest.raises(TimeoutError):
        with MaskAhead(clients[me]) as ahead:
            raise TimeoutError("the share delivery did not come")
    assert not ahead.thread.is_alive() and _mask_threads() == []
    x = np.zeros(params.length)
    delivery = server.delivery_for(me)
    assert clients[me].masked_input(delivery, x).tobytes() == twin.masked_input(delivery, x).tobytes()


@pytest.mark.slow
async def test_devices_whose_round_aborts_during_the_share_wait_leave_no_mask_thread(start_coordinator):
    ids = [f"dev-{i}" for i in range(5)]
    coord = await start_coordinator(rounds=1, min_clients=5, secagg=True, secagg_neighbours=4, secagg_threshold=3,
                                    round_timeout_s=2)
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas_for(ids, P_MLP), {c: "share" for c in ids[:3]})
    assert all(outcomes[c][0][0] == "stale" for c in ids[3:]), outcomes      # waited for the delivery, then aborted
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.FAILED
    assert _mask_threads() == []


def test_masks_are_expanded_ahead_only_by_a_device_alone_on_its_transport():
    from types import SimpleNamespace

    from fedort.edge_client.secagg.ahead import worth_it
    from fedort.edge_client.secagg.wire import StepBatcher

    steps = StepBatcher(transport=None)
    worker = SimpleNamespace(secagg_steps=steps)
    with steps.flow():
        assert worth_it(worker)                      # one device: its CPU idles while it waits
        with steps.flow():
            assert not worth_it(worker)              # many on one transport (a simulation worker): no idle CPU
    assert worth_it(SimpleNamespace())               # a transport without a batcher carries one device
