"""Shamir secret sharing of 32-byte secrets with pycryptodome's `Shamir` (GF(2^128)).

pycryptodome shares 16-byte secrets only, so a 32-byte secret (an X25519 private key or a
self-mask seed) is cut into two 16-byte halves, each shared with its own random polynomial of
degree T-1 at the same points 1..n; a share is the two 16-byte halves concatenated. Each half
is perfectly hidden from fewer than T shares, so the pair is too. No arithmetic is written here.
"""

from __future__ import annotations

from typing import Sequence

from Crypto.Protocol.SecretSharing import Shamir

from fedort.protos.errors import ConfigError
from fedort.protos.secagg.errors import SecAggError

SECRET_BYTES = 32


def split_secret(secret: bytes, threshold: int, holders: int) -> list[tuple[int, bytes]]:
    """`holders` shares (index 1..holders, 32 bytes each); any `threshold` recover the secret."""
    if len(secret) != SECRET_BYTES:
        raise ConfigError(f"Shamir secret must be {SECRET_BYTES} bytes, got {len(secret)}")
    if not 1 <= threshold <= holders:
        raise ConfigError(f"Shamir needs 1 <= threshold <= holders, got {threshold} of {holders}")
    low = Shamir.split(threshold, holders, secret[:16])
    high = Shamir.split(threshold, holders, secret[16:])
    return [(i, a + b) for (i, a), (_, b) in zip(low, high)]


def combine_secret(shares: Sequence[tuple[int, bytes]], threshold: int) -> bytes:
    """The secret from at least `threshold` distinct shares (exactly `threshold` are used)."""
    distinct = dict(shares)
    if len(distinct) < threshold:
        raise SecAggError(f"Shamir needs {threshold} distinct shares, got {len(distinct)}")
    chosen = sorted(distinct.items())[:threshold]
    if any(len(s) != SECRET_BYTES for _, s in chosen):
        raise SecAggError(f"a Shamir share must be {SECRET_BYTES} bytes")
    return Shamir.combine([(i, s[:16]) for i, s in chosen]) + Shamir.combine([(i, s[16:]) for i, s in chosen])
