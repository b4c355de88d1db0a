"""The shared secure-aggregation primitives: fixed point, PRG, keys, Shamir, graph, messages."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fedort.common.errors import ConfigError, VectorError
from fedort.common.secagg import (
    AdvertiseKeys, FixedPoint, SecAggError, SecAggParams, UnmaskResponse, modulus_bits, neighbour_graph,
)
from fedort.common.secagg.keys import Agreement, KeyPair, agree, open_sealed, public_of, seal
from fedort.common.secagg.prg import MaskAdder, expand
from fedort.common.secagg.shamir import combine_secret, combine_secrets, split_secret


def test_modulus_bits_leave_room_for_the_whole_cohort_at_the_extreme():
    fp = FixedPoint.for_cohort(100, clip=1.0, scale=2.0**20)
    extreme = [fp.encode(np.full(3, sign * 5.0)) for sign in (1, -1)]
    for enc in extreme:
        total = np.zeros(4, dtype=np.uint64)
        for _ in range(100):
            total += enc
        weighted, weight = fp.decode_sum(total)
        assert weighted.tolist() == [float(np.sign(fp.to_signed(enc)[0])) * 100.0] * 3
        assert weight == 100.0


def test_modulus_bits_refuse_configs_that_would_wrap_64_bits():
    with pytest.raises(ConfigError, match="bits"):
        modulus_bits(10**6, clip=1000.0, scale=2.0**40)


def test_encode_carries_the_weight_and_premultiplies_it():
    fp = FixedPoint.for_cohort(4, clip=2.0, scale=2.0**10, max_weight=8.0)
    weighted, weight = fp.decode_sum(fp.encode(np.array([0.5, -3.0]), weight=4.0))
    assert weighted.tolist() == [2.0, -8.0] and weight == 4.0


def test_prg_is_deterministic_and_below_the_modulus():
    seed = os.urandom(32)
    a, b = expand(seed, 5000, 20), expand(seed, 5000, 20)
    assert np.array_equal(a, b) and int(a.max()) < 2**20
    assert not np.array_equal(a, expand(os.urandom(32), 5000, 20))


def test_x25519_agreement_is_symmetric_and_bound_to_info():
    u, v = KeyPair.generate(), KeyPair.generate()
    assert agree(u.private, v.public, b"x") == agree(v.private, u.public, b"x")
    assert agree(u.private, v.public, b"x") != agree(u.private, v.public, b"y")
    assert public_of(u.private) == u.public


def test_a_key_pair_from_a_seed_is_reproducible():
    seed = os.urandom(16)
    assert KeyPair.from_seed(seed) == KeyPair.from_seed(seed) != KeyPair.from_seed(os.urandom(16))


def test_sealed_share_refuses_other_associated_data():
    key = os.urandom(32)
    box = seal(key, b"share", b"to:a")
    assert open_sealed(key, box, b"to:a") == b"share"
    with pytest.raises(SecAggError, match="authentication"):
        open_sealed(key, box, b"to:b")


def test_shamir_recovers_16_bytes_from_threshold_shares_only():
    secret = os.urandom(16)
    shares = split_secret(secret, 3, 5)
    assert combine_secret(shares[2:], 3) == secret
    assert combine_secret(shares[:2] + shares[4:], 3) == secret
    with pytest.raises(SecAggError, match="3 distinct"):
        combine_secret(shares[:2], 3)


def test_graph_is_symmetric_with_the_requested_degree():
    ids = [f"c{i}" for i in range(50)]
    graph = neighbour_graph(ids, 8, b"seed")
    assert all(len(graph[i]) == 8 and i not in graph[i] for i in ids)
    assert all(i in graph[j] for i in ids for j in graph[i])


def test_graph_with_degree_n_minus_1_is_complete():
    ids = [f"c{i}" for i in range(7)]
    assert all(len(n) == 6 for n in neighbour_graph(ids, 6, b"s").values())


def test_params_refuse_a_threshold_below_a_majority_of_neighbours():
    with pytest.raises(ConfigError, match="threshold"):
        SecAggParams(1, ("a", "b", "c", "d", "e"), 2, 4, b"s", FixedPoint.for_cohort(5, 1.0, 256.0), 10)


def test_messages_round_trip_through_bytes():
    params = SecAggParams(3, ("b", "a", "c"), 2, 2, b"seed", FixedPoint.for_cohort(3, 1.0, 256.0), 10)
    assert SecAggParams.from_bytes(params.to_bytes()) == params
    keys = AdvertiseKeys("a", os.urandom(32), os.urandom(32))
    assert AdvertiseKeys.from_bytes(keys.to_bytes()) == keys
    resp = UnmaskResponse("a", {"b": (1, os.urandom(16))}, {"c": (2, os.urandom(16))})
    assert UnmaskResponse.from_bytes(resp.to_bytes()) == resp


@pytest.mark.parametrize("block", [1 << 17, 100, 7])
def test_masks_added_in_place_equal_the_expanded_masks_mod_2b(block):
    seeds, acc = [os.urandom(32) for _ in range(3)], np.arange(1001, dtype=np.uint64)
    expected = (acc + expand(seeds[0], 1001, 21) - expand(seeds[1], 1001, 21) + expand(seeds[2], 1001, 21))
    adder = MaskAdder(1001, block)
    for seed, sign in zip(seeds, (1, -1, 1)):
        adder.add(acc, seed, sign, 21)
    assert np.array_equal(acc & np.uint64(2**21 - 1), expected & np.uint64(2**21 - 1))


def test_batched_shamir_recovers_every_secret_like_the_one_by_one_combine():
    secrets = [os.urandom(16) for _ in range(6)]
    share_lists = [split_secret(s, 4, 7) for s in secrets]
    share_lists[2] = share_lists[2][1:]            # another index set for some secrets
    share_lists[4] = share_lists[4][::-1]
    assert combine_secrets(share_lists, 4) == secrets == [combine_secret(s, 4) for s in share_lists]
    with pytest.raises(SecAggError, match="4 distinct"):
        combine_secrets([share_lists[0][:3]], 4)


def test_an_agreement_with_many_peers_equals_agree_one_by_one():
    u, peers = KeyPair.generate(), [KeyPair.generate() for _ in range(3)]
    mine = Agreement(u.private)
    assert [mine.key(p.public, b"i") for p in peers] == [agree(u.private, p.public, b"i") for p in peers]
    assert mine.key(peers[0].public, b"j") == agree(peers[0].private, u.public, b"j")


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_an_update_encoded_into_an_accumulator_adds_its_rounded_weighted_values_mod_2b(dtype):
    fp = FixedPoint.for_cohort(50, clip=1.5, scale=2.0**12, max_weight=4.0)  # 24 bits: fits either accumulator
    x = np.random.default_rng(1).normal(0.0, 1.0, 70_000)  # more than one block, clipped in places
    start = np.random.default_rng(2).integers(0, 2**32, size=70_001, dtype=np.uint64).astype(dtype)
    acc = start.copy()
    fp.add_encoded(acc, x, 2.5)
    q = np.rint(np.clip(x, -1.5, 1.5) * 2.5 * 2.0**12).astype(np.int64)
    expected = start.astype(np.uint64) + np.append(q, round(2.5 * 2.0**12)).view(np.uint64)
    assert acc.dtype == dtype
    assert np.array_equal(acc.astype(np.uint64) & fp.modulus_mask, expected & fp.modulus_mask)


def test_encoding_a_vector_with_nan_leaves_the_accumulator_as_it_was():
    fp = FixedPoint.for_cohort(4, clip=1.0, scale=2.0**8)
    acc = np.arange(5, dtype=np.uint32)
    with pytest.raises(VectorError, match="NaN or infinity"):
        fp.add_encoded(acc, np.array([0.5, np.nan, 0.0, np.inf]))
    assert acc.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(VectorError, match="do not fit a uint32"):
        FixedPoint.for_cohort(4, clip=1.0, scale=2.0**40).add_encoded(acc, np.zeros(4))


def test_an_update_encoded_from_a_trained_vector_minus_its_global_is_the_encoded_float64_difference():
    fp = FixedPoint.for_cohort(10, clip=0.5, scale=2.0**16)
    rng = np.random.default_rng(3)
    g = rng.normal(0.0, 1.0, 40_000).astype(np.float32)
    trained = (g + rng.normal(0.0, 0.3, g.size)).astype(np.float32)
    acc = np.zeros(g.size + 1, dtype=np.uint64)
    fp.add_encoded(acc, trained, 0.75, minus=g)
    assert np.array_equal(acc & fp.modulus_mask, fp.encode(np.subtract(trained, g, dtype=np.float64), 0.75))
    with pytest.raises(VectorError, match="NaN or infinity"):
        fp.add_encoded(acc, trained, 0.75, minus=np.full_like(g, np.inf))
