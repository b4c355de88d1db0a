"""Shamir secret sharing of 16-byte seeds with pycryptodome's `Shamir` (GF(2^128)).

pycryptodome shares 16-byte secrets, and that is all the protocol shares: a client's two
secrets are 16-byte seeds — the self-mask seed b, and the seed its X25519 mask key is derived
from with HKDF (`keys.KeyPair.from_seed`) — so 128-bit security, the level of X25519 itself.
Sharing seeds instead of 32-byte keys halves the (pure-Python) sharing work, which dominates
the server's unmasking time for large thresholds. No field arithmetic is written here.
"""

from __future__ import annotations

from typing import Sequence

from Crypto.Protocol.SecretSharing import Shamir

from fedort.protos.errors import ConfigError
from fedort.protos.secagg.errors import SecAggError

SECRET_BYTES = 16


def split_secret(secret: bytes, threshold: int, holders: int) -> list[tuple[int, bytes]]:
    """`holders` shares (index 1..holders, 16 bytes each); any `threshold` recover the secret."""
    if len(secret) != SECRET_BYTES:
        raise ConfigError(f"Shamir secret must be {SECRET_BYTES} bytes, got {len(secret)}")
    if not 1 <= threshold <= holders:
        raise ConfigError(f"Shamir needs 1 <= threshold <= holders, got {threshold} of {holders}")
    return list(Shamir.split(threshold, holders, secret))


def combine_secret(shares: Sequence[tuple[int, bytes]], threshold: int) -> bytes:
    """The secret from at least `threshold` distinct shares (exactly `threshold` are used)."""
    distinct = dict(shares)
    if len(distinct) < threshold:
        raise SecAggError(f"Shamir needs {threshold} distinct shares, got {len(distinct)}")
    chosen = sorted(distinct.items())[:threshold]
    if any(len(s) != SECRET_BYTES or i < 1 for i, s in chosen):
        raise SecAggError(f"a Shamir share must be {SECRET_BYTES} bytes with a positive index")
    return Shamir.combine(chosen)
