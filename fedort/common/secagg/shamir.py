"""Shamir secret sharing of 16-byte seeds with pycryptodome's `Shamir` (GF(2^128)).

pycryptodome shares 16-byte secrets, and that is all the protocol shares: a client's two
secrets are 16-byte seeds — the self-mask seed b, and the seed its X25519 mask key is derived
from with HKDF (`keys.KeyPair.from_seed`) — so 128-bit security, the level of X25519 itself.
Sharing seeds instead of 32-byte keys halves the (pure-Python) sharing work.

`combine_secrets` reconstructs many secrets at once. pycryptodome's `Shamir.combine` computes
the Lagrange coefficients at zero, λ_j = Π_{m≠j} x_m / Π_{m≠j} (x_j + x_m), for every secret —
O(T²) multiplications in its pure-Python GF(2^128) — although they
depend only on the share indices, and the server's secrets mostly share one index set (each
holder's index is its rank among the sender's holders, and the lowest T indices present are
used). So it computes λ once per index set and each secret as Σ_j λ_j·y_j (T multiplications),
with pycryptodome's own field element type for all arithmetic (no field code is written here),
and checks the first secret of every index set against `Shamir.combine` itself: should the
library's internals ever differ, every secret is combined by `Shamir.combine` instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from Crypto.Protocol.SecretSharing import Shamir

from fedort.common.errors import ConfigError
from fedort.common.secagg.errors import SecAggError

try:  # pycryptodome's GF(2^128) element (private): only for reusing Lagrange coefficients, checked below
    from Crypto.Protocol.SecretSharing import _Element
except ImportError:  # pragma: no cover - a pycryptodome without it: plain Shamir.combine
    _Element = None  # type: ignore[assignment, misc]  # the optional private class is absent

SECRET_BYTES = 16
Share = tuple[int, bytes]


def split_secret(secret: bytes, threshold: int, holders: int) -> list[Share]:
    """`holders` shares (index 1..holders, 16 bytes each); any `threshold` recover the secret."""
    check_split(secret, threshold, holders)
    return list(Shamir.split(threshold, holders, secret))


def check_split(secret: bytes, threshold: int, holders: int) -> None:
    """ConfigError unless `secret` is a 16-byte seed and 1 <= threshold <= holders (both schemes' split)."""
    if len(secret) != SECRET_BYTES:
        raise ConfigError(f"Shamir secret must be {SECRET_BYTES} bytes, got {len(secret)}")
    if not 1 <= threshold <= holders:
        raise ConfigError(f"Shamir needs 1 <= threshold <= holders, got {threshold} of {holders}")


def _chosen(shares: Sequence[Share], threshold: int) -> list[Share]:
    """The `threshold` distinct shares with the lowest indices (SecAggError if too few or malformed)."""
    distinct = dict(shares)
    if len(distinct) < threshold:
        raise SecAggError(f"Shamir needs {threshold} distinct shares, got {len(distinct)}")
    chosen = sorted(distinct.items())[:threshold]
    if any(len(s) != SECRET_BYTES or i < 1 for i, s in chosen):
        raise SecAggError(f"a Shamir share must be {SECRET_BYTES} bytes with a positive index")
    return chosen


def combine_secret(shares: Sequence[Share], threshold: int) -> bytes:
    """The secret from at least `threshold` distinct shares (exactly `threshold` are used)."""
    return Shamir.combine(_chosen(shares, threshold))


def _lagrange_at_zero(indices: tuple[int, ...]) -> list:
    """λ_j for the index set, as pycryptodome computes them inside `Shamir.combine`."""
    xs = [_Element(i) for i in indices]
    out = []
    for j, x_j in enumerate(xs):
        numerator, denominator = _Element(1), _Element(1)
        for m, x_m in enumerate(xs):
            if m != j:
                numerator *= x_m
                denominator *= x_j + x_m
        out.append(numerator * denominator.inverse())
    return out


def _combine_with(coefficients: list, chosen: list[Share]) -> bytes:
    total = _Element(0)
    for lam, (_, y) in zip(coefficients, chosen):
        total += _Element(y) * lam
    return total.encode()


def combine_secrets(share_lists: Sequence[Sequence[Share]], threshold: int) -> list[bytes]:
    """`combine_secret` for many secrets, equal results, Lagrange coefficients computed once per index set."""
    chosen = [_chosen(shares, threshold) for shares in share_lists]
    if _Element is None:
        return [Shamir.combine(c) for c in chosen]
    out: list[bytes | None] = [None] * len(chosen)
    groups: dict[tuple[int, ...], list[int]] = {}
    for k, c in enumerate(chosen):
        groups.setdefault(tuple(i for i, _ in c), []).append(k)
    for indices, members in groups.items():
        coefficients = _lagrange_at_zero(indices)
        first = Shamir.combine(chosen[members[0]])
        if _combine_with(coefficients, chosen[members[0]]) != first:  # library internals changed: no shortcut
            return [Shamir.combine(c) for c in chosen]
        out[members[0]] = first
        for k in members[1:]:
            out[k] = _combine_with(coefficients, chosen[k])
    return out  # type: ignore[return-value]
