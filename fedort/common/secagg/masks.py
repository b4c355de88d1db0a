"""The masks both sides compute: self mask PRG(b_u) and pairwise masks ±PRG(s_uv).

Client u uploads y_u = x_u + PRG(b_u) + sum_{v in N(u) ∩ U2} sign(u, v) * PRG(s_uv)  (mod 2^b)
with sign(u, v) = +1 if u < v else -1, so the pairwise terms of two survivors cancel in the sum.
s_uv = HKDF(X25519(s_u_sk, s_v_pk)) is the same for u and v; the server learns it only for a
dropped v, from v's reconstructed s_v_sk. `pairwise_seed`/`self_key` give the 32-byte PRG keys,
which a `prg.MaskAdder` adds into an accumulator in place (`pairwise_mask`/`self_mask` return
the mask vectors themselves, for tests and one-off use).
"""

from __future__ import annotations

import numpy as np

from fedort.common.secagg.keys import Agreement, derive
from fedort.common.secagg.messages import SecAggParams
from fedort.common.secagg.prg import expand


def pairwise_sign(u: str, v: str) -> int:
    return 1 if u < v else -1


def pairwise_seed(params: SecAggParams, mine: Agreement, peer_public: bytes, u: str, v: str) -> bytes:
    """s_uv: the PRG key of the pair (u, v); `mine` holds either end's s_sk, `peer_public` is the other's s_pk."""
    return mine.key(peer_public, params.info("mask", u, v))


def self_key(params: SecAggParams, seed: bytes) -> bytes:
    """The PRG key of the self mask: the 16-byte seed b_u stretched to a 32-byte cipher key with HKDF."""
    return derive(seed, params.info("self", "", ""))


def pairwise_mask(params: SecAggParams, private: bytes, peer_public: bytes, u: str, v: str) -> np.ndarray:
    """PRG(s_uv) for the pair (u, v), reduced mod 2^b."""
    return expand(
        pairwise_seed(params, Agreement(private), peer_public, u, v),
        params.length + 1,
        params.fixed_point.bits,
        params.scheme,
    )


def self_mask(params: SecAggParams, seed: bytes) -> np.ndarray:
    """PRG(b_u), reduced mod 2^b."""
    return expand(self_key(params, seed), params.length + 1, params.fixed_point.bits, params.scheme)


def add_signed(acc: np.ndarray, mask: np.ndarray, sign: int) -> None:
    """acc += sign * mask (mod 2^64, hence mod 2^b) in place."""
    if sign > 0:
        np.add(acc, mask, out=acc)
    else:
        np.subtract(acc, mask, out=acc)
