"""Shamir sharing over Z_p, p = 2^130 − 5, and the AES-128-CTR mask PRG (scheme aes128ctr-p130)."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
import shamirs
from Crypto.Math import Primality

from fedort.common.errors import ConfigError
from fedort.common.secagg import SecAggError
from fedort.common.secagg.prg import MaskAdder, accumulator_dtype, expand
from fedort.common.secagg.scheme import AES_PRIME, AES_PRIME_W32, LEGACY
from fedort.common.secagg.shamir_prime import PRIME, SHARE_BYTES, combine_secret, combine_secrets, split_secret


def _eval_through(points: list[tuple[int, int]], x: int) -> int:
    """The value at x of the polynomial of degree < len(points) through `points` (mod p), for the test."""
    total = 0
    for j, (x_j, y_j) in enumerate(points):
        num = den = 1
        for m, (x_m, _) in enumerate(points):
            if m != j:
                num, den = num * (x - x_m) % PRIME, den * (x_j - x_m) % PRIME
        total += y_j * num * pow(den, -1, PRIME)
    return total % PRIME


def test_the_field_is_prime_and_holds_every_16_byte_secret():
    assert Primality.test_probable_prime(PRIME) != Primality.COMPOSITE and PRIME > 2**128


def test_any_threshold_shares_recover_the_secret():
    secret = os.urandom(16)
    shares = split_secret(secret, 3, 6)
    assert [i for i, _ in shares] == [1, 2, 3, 4, 5, 6] and all(len(y) == SHARE_BYTES for _, y in shares)
    for subset in itertools.combinations(shares, 3):
        assert combine_secret(list(subset), 3) == secret
    assert combine_secret(shares, 3) == secret                       # more than T: the lowest T are used


def test_fewer_than_threshold_distinct_shares_are_refused():
    shares = split_secret(os.urandom(16), 4, 6)
    with pytest.raises(SecAggError, match="4 distinct"):
        combine_secret(shares[:3], 4)
    with pytest.raises(SecAggError, match="4 distinct"):
        combine_secret(shares[:3] + [shares[0]], 4)                 # a repeated share is not a fourth


def test_duplicate_and_out_of_range_indices_are_refused():
    shares = split_secret(os.urandom(16), 3, 5)
    forged = (shares[0][0], bytes(SHARE_BYTES))
    with pytest.raises(SecAggError, match="two different Shamir shares carry index 1"):
        combine_secret(shares[:3] + [forged], 3)
    for bad in (0, -1, PRIME):
        with pytest.raises(SecAggError, match="index"):
            combine_secret(shares[:2] + [(bad, shares[2][1])], 3)
    with pytest.raises(SecAggError, match="below the field"):
        combine_secret(shares[:2] + [(9, PRIME.to_bytes(SHARE_BYTES, "big"))], 3)
    with pytest.raises(SecAggError, match="17 bytes"):
        combine_secret(shares[:2] + [(9, b"\x01" * 16)], 3)


def test_threshold_minus_one_shares_are_consistent_with_any_secret():
    """T − 1 shares do not determine the secret: for two different secrets there is a polynomial of
    degree < T through the same T − 1 shares and either secret, so one more share completes both."""
    t, s1, s2 = 4, os.urandom(16), os.urandom(16)
    known = [(i, int.from_bytes(y, "big")) for i, y in split_secret(s1, t, 6)[:t - 1]]
    for secret in (s1, s2):
        poly = known + [(0, int.from_bytes(secret, "big"))]
        extra = (7, _eval_through(poly, 7).to_bytes(SHARE_BYTES, "big"))
        shares = [(i, v.to_bytes(SHARE_BYTES, "big")) for i, v in known] + [extra]
        assert combine_secret(shares, t) == secret


def test_batched_reconstruction_equals_the_library_interpolation():
    secrets_ = [os.urandom(16) for _ in range(5)]
    lists = [split_secret(s, 4, 7) for s in secrets_]
    lists[1], lists[3] = lists[1][2:], lists[3][::-1]                # other index sets, any order
    assert combine_secrets(lists, 4) == secrets_
    for s, shares in zip(secrets_, lists):
        chosen = sorted(shares)[:4]
        lib = shamirs.interpolate([shamirs.share(i, int.from_bytes(y, "big"), PRIME) for i, y in chosen], threshold=4)
        assert lib.to_bytes(16, "big") == s


def test_one_holder_and_bad_parameters():
    secret = os.urandom(16)
    assert combine_secret(split_secret(secret, 1, 1), 1) == secret
    with pytest.raises(ConfigError, match="16 bytes"):
        split_secret(b"short", 1, 2)
    with pytest.raises(ConfigError, match="threshold"):
        split_secret(secret, 3, 2)


def test_aes_masks_are_deterministic_per_seed_and_differ_from_chacha20():
    seed = os.urandom(32)
    a = expand(seed, 5000, 40, AES_PRIME)
    assert np.array_equal(a, expand(seed, 5000, 40, AES_PRIME)) and int(a.max()) < 2**40
    assert not np.array_equal(a, expand(seed, 5000, 40, LEGACY))   # the reason schemes must never be mixed
    assert not np.array_equal(a, expand(os.urandom(32), 5000, 40, AES_PRIME))


@pytest.mark.parametrize("block", [1 << 15, 100, 7])
def test_aes_masks_added_in_place_equal_the_expanded_masks(block):
    seeds, acc = [os.urandom(32) for _ in range(3)], np.arange(70_001, dtype=np.uint64)
    expected = acc + expand(seeds[0], 70_001, 33, AES_PRIME) - expand(seeds[1], 70_001, 33, AES_PRIME) \
        + expand(seeds[2], 70_001, 33, AES_PRIME)
    adder = MaskAdder(70_001, block, scheme=AES_PRIME)
    for seed, sign in zip(seeds, (1, -1, 1)):
        adder.add(acc, seed, sign, 33)
    mask = np.uint64(2**33 - 1)
    assert np.array_equal(acc & mask, expected & mask)


@pytest.mark.parametrize("bits", [24, 32, 40])
def test_32_bit_word_masks_added_in_place_equal_the_expanded_masks(bits):
    seeds, acc = [os.urandom(32) for _ in range(2)], np.arange(70_001, dtype=np.uint64)
    mask = np.uint64(2**bits - 1)
    expected = acc + expand(seeds[0], 70_001, bits, AES_PRIME_W32) - expand(seeds[1], 70_001, bits, AES_PRIME_W32)
    adder = MaskAdder(70_001, 1000, scheme=AES_PRIME_W32)
    for seed, sign in zip(seeds, (1, -1)):
        adder.add(acc, seed, sign, bits)
    assert np.array_equal(acc & mask, expected & mask)
    words = expand(seeds[0], 70_001, bits, AES_PRIME_W32)
    assert int(words.max()) < 2**bits and int(words.max()) >= 2**(bits - 1)     # the whole range is used
    assert np.array_equal(words, expand(seeds[0], 70_001, bits, AES_PRIME)) is (bits > 32)  # 64-bit words above 32


@pytest.mark.parametrize("bits", [8, 24, 32])
def test_a_uint32_accumulator_of_32_bit_word_masks_agrees_mod_2_to_the_b(bits):
    seeds, mask = [os.urandom(32) for _ in range(3)], np.uint64(2**bits - 1)
    wide, narrow = np.zeros(70_001, dtype=np.uint64), np.zeros(70_001, dtype=accumulator_dtype(AES_PRIME_W32, bits))
    adder = MaskAdder(70_001, 1000, scheme=AES_PRIME_W32)
    for seed, sign in zip(seeds, (1, -1, -1)):
        adder.add(wide, seed, sign, bits)
        adder.add(narrow, seed, sign, bits)
    assert narrow.dtype == np.uint32
    assert np.array_equal(narrow.astype(np.uint64) & mask, wide & mask)


@pytest.mark.parametrize("scheme, bits", [(AES_PRIME_W32, 40), (AES_PRIME, 24), (LEGACY, 24)])
def test_masks_of_64_bit_words_refuse_a_uint32_accumulator(scheme, bits):
    assert accumulator_dtype(scheme, bits) == np.uint64
    with pytest.raises(ConfigError, match="must be uint64 of shape"):
        MaskAdder(100, scheme=scheme).add(np.zeros(100, dtype=np.uint32), os.urandom(32), 1, bits)


@pytest.mark.parametrize("scheme, bits, dtype, block", [
    (AES_PRIME_W32, 24, np.uint32, 1 << 15), (AES_PRIME_W32, 24, np.uint32, 999), (AES_PRIME_W32, 24, np.uint64, 1000),
    (AES_PRIME, 40, np.uint64, 1 << 15), (LEGACY, 24, np.uint64, 7)])
def test_a_mask_assigned_to_an_accumulator_is_the_mask_added_to_a_zeroed_one(scheme, bits, dtype, block):
    seed = os.urandom(32)
    added, assigned = np.zeros(70_001, dtype=dtype), np.full(70_001, 12345, dtype=dtype)  # assign ignores the old
    adder = MaskAdder(70_001, block, scheme=scheme)
    adder.add(added, seed, 1, bits)
    adder.assign(assigned, seed, bits)
    assert np.array_equal(assigned, added)
    mask = np.uint64(2**bits - 1)
    assert np.array_equal(assigned.astype(np.uint64) & mask, expand(seed, 70_001, bits, scheme))
