"""Shamir secret sharing of 16-byte seeds over the prime field Z_p, p = 2^130 − 5 (scheme `aes128ctr-p130`).

Splitting is the `shamirs` library's (a maintained pure-Python implementation over a prime field:
polynomial coefficients from `secrets.randbelow(p)`, shares at x = 1..n). Python's integers make a
130-bit multiplication mod p far cheaper than pycryptodome's pure-Python GF(2^128) of the legacy
scheme, and so a device's split of its seeds among its neighbours.
A 16-byte secret s (big-endian, < 2^128 < p) is the polynomial's value at 0; a share's
value travels as 17 bytes big-endian.

Reconstruction: `shamirs.interpolate` recomputes the Lagrange basis with T² modular inversions
for every secret, although the coefficients depend only on the share indices
and the server's secrets mostly share one index set. So `combine_secrets` computes, once per index
set {x_j}, λ_j = Π_{m≠j} x_m / (x_m − x_j) mod p, each secret as Σ_j λ_j·y_j mod p, and checks the
first secret of every call against `shamirs.interpolate` itself (any disagreement: SecAggError; one
check per call, since it alone costs T² modular inversions).
"""

from __future__ import annotations

from collections.abc import Sequence

import shamirs

from fedort.common.secagg.errors import SecAggError
from fedort.common.secagg.shamir import SECRET_BYTES, check_split

PRIME = 2**130 - 5
SHARE_BYTES = 17
Share = tuple[int, bytes]


def split_secret(secret: bytes, threshold: int, holders: int) -> list[Share]:
    """`holders` shares (index 1..holders, 17 bytes each); any `threshold` recover the secret."""
    check_split(secret, threshold, holders)
    value = int.from_bytes(secret, "big")
    if holders == 1:  # threshold 1: the constant polynomial (shamirs wants >= 2 shares)
        return [(1, value.to_bytes(SHARE_BYTES, "big"))]
    return [
        (int(s.index), int(s.value).to_bytes(SHARE_BYTES, "big"))
        for s in shamirs.shares(value, holders, PRIME, threshold)
    ]


def _chosen(shares: Sequence[Share], threshold: int) -> list[tuple[int, int]]:
    """The `threshold` distinct shares with the lowest indices, values as ints (SecAggError if not enough or malformed)."""
    if any(not 1 <= i < PRIME for i, _ in shares):
        raise SecAggError(f"a Shamir share index must be in [1, p), got {sorted({i for i, _ in shares})}")
    distinct: dict[int, bytes] = {}
    for i, y in shares:
        if distinct.setdefault(i, y) != y:
            raise SecAggError(f"two different Shamir shares carry index {i}")
    if len(distinct) < threshold:
        raise SecAggError(f"Shamir needs {threshold} distinct shares, got {len(distinct)}")
    chosen = sorted(distinct.items())[:threshold]
    if any(len(y) != SHARE_BYTES for _, y in chosen):
        raise SecAggError(f"a Shamir share value must be {SHARE_BYTES} bytes")
    values = [(i, int.from_bytes(y, "big")) for i, y in chosen]
    if any(v >= PRIME for _, v in values):
        raise SecAggError("a Shamir share value is not below the field's prime")
    return values


def _secret(value: int) -> bytes:
    if value >= 1 << (8 * SECRET_BYTES):
        raise SecAggError("the Shamir shares do not belong to one 16-byte secret (reconstructed value too large)")
    return value.to_bytes(SECRET_BYTES, "big")


def lagrange_at_zero(indices: Sequence[int]) -> list[int]:
    """λ_j with Σ_j λ_j·f(x_j) = f(0) mod p for every polynomial f of degree < len(indices)."""
    out = []
    for j, x_j in enumerate(indices):
        num = den = 1
        for m, x_m in enumerate(indices):
            if m != j:
                num = num * x_m % PRIME
                den = den * (x_m - x_j) % PRIME
        out.append(num * pow(den, -1, PRIME) % PRIME)
    return out


def combine_secret(shares: Sequence[Share], threshold: int) -> bytes:
    """The secret from at least `threshold` distinct shares (exactly `threshold` are used)."""
    return combine_secrets([shares], threshold)[0]


def combine_secrets(share_lists: Sequence[Sequence[Share]], threshold: int) -> list[bytes]:
    """Every secret, Lagrange coefficients computed once per index set (see the module docstring)."""
    chosen = [_chosen(shares, threshold) for shares in share_lists]
    out: list[bytes] = [b""] * len(chosen)
    groups: dict[tuple[int, ...], list[int]] = {}
    for k, c in enumerate(chosen):
        groups.setdefault(tuple(i for i, _ in c), []).append(k)
    for indices, members in groups.items():
        lam = lagrange_at_zero(indices)
        for k in members:
            out[k] = _secret(sum(c * y for c, (_, y) in zip(lam, chosen[k])) % PRIME)
    if chosen and len(chosen[0]) > 1:  # one check per call: T^2 inversions
        first = shamirs.interpolate([shamirs.share(i, y, PRIME) for i, y in chosen[0]], threshold=len(chosen[0]))
        if first != int.from_bytes(out[0], "big"):
            raise SecAggError("batched Lagrange reconstruction disagrees with shamirs.interpolate")  # pragma: no cover
    return out
