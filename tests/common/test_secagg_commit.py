"""fedort.common.secagg.commit: a share commitment opens only with the exact share, index, salt, dealer,
holder, kind and round it was made for; the seed digest names one seed of one dealer in one round."""

from __future__ import annotations

import os

from fedort.common.secagg.commit import KEY, SEED, opens, seed_digest, share_commitment


def test_a_commitment_opens_with_what_it_was_made_for_and_with_nothing_else():
    value, salt = os.urandom(17), os.urandom(16)
    c = share_commitment(1001, "a", "b", SEED, 2, value, salt)
    assert opens(c, 1001, "a", "b", SEED, 2, value, salt)
    other = bytes([value[0] ^ 1]) + value[1:]
    changed = [
        (1002, "a", "b", SEED, 2, value, salt),  # another round
        (1001, "c", "b", SEED, 2, value, salt),  # another dealer
        (1001, "a", "c", SEED, 2, value, salt),  # another holder
        (1001, "a", "b", KEY, 2, value, salt),  # the other secret
        (1001, "a", "b", SEED, 3, value, salt),  # another index
        (1001, "a", "b", SEED, 2, other, salt),  # another value
        (1001, "a", "b", SEED, 2, value, os.urandom(16)),  # another salt
        (1001, "a", "b", SEED, 2, value, b""),  # no salt
    ]
    assert not any(opens(c, *args) for args in changed)


def test_the_salt_makes_commitments_to_one_share_differ():
    value = os.urandom(17)
    assert share_commitment(1, "a", "b", KEY, 1, value, os.urandom(16)) != share_commitment(
        1, "a", "b", KEY, 1, value, os.urandom(16))


def test_a_seed_digest_is_bound_to_its_dealer_and_round():
    seed = os.urandom(16)
    assert seed_digest(1, "a", seed) == seed_digest(1, "a", seed)
    assert len({seed_digest(1, "a", seed), seed_digest(2, "a", seed), seed_digest(1, "b", seed)}) == 3
