"""Which unmask shares the coordinator trusts: what the public neighbour graph and the shares
themselves let it check, so a member that answers the unmask request with wrong shares is caught
and left out, instead of crashing the round or unmasking a silently wrong sum.

    index check   owner o's holders are its roster (neighbours in U1) in sorted order, holder k of
                  them got share index k + 1: a share whose index is not its sender's is a lie.
    commitment    (the committed scheme) each revealed share must open the commitment its dealer
                  made for that holder (`fedort.common.secagg.commit`): a share that does not names
                  its holder, whatever the number of spare shares. A holder that could not open a
                  bundle, or found it off its commitments, names the dealer instead (a complaint)
                  and reveals nothing of it.
    consistency   (the other AES schemes) the T + e shares of one secret lie on one polynomial of
                  degree T − 1; with e ≥ 1 extra shares a wrong one is seen, with e ≥ 2 the one share
                  whose removal makes the rest agree is found.

A responder caught once is a cheater: all its shares are dropped and the checks run again. A
secret left with fewer than T trusted shares, or a disagreement no single share explains, ends
the round with SecAggAborted naming it (a clean failure, never a wrong sum). Under the legacy
GF(2^128) scheme only the index check runs. The mask key of a dropped client is further checked
against its advertised public key when it is rebuilt, and under the committed scheme each rebuilt
self-mask seed against its dealer's digest (`server.finish`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedort.common.secagg.commit import KEY, SEED, opens
from fedort.common.secagg.errors import SecAggAborted
from fedort.common.secagg.messages import AdvertiseKeys, SecAggParams, UnmaskRequest, UnmaskResponse
from fedort.common.secagg.scheme import AES_SCHEMES, committed
from fedort.common.secagg.shamir_prime import PRIME

if TYPE_CHECKING:
    from fedort.coordinator.privacy.secagg.server_state import SecAggServerState

log = logging.getLogger(__name__)
Share = tuple[int, bytes]


@dataclass(frozen=True)
class TrustedShares:
    """The shares to rebuild each secret from (owner -> shares), and who was caught lying."""

    seed: dict[str, list[Share]]
    key: dict[str, list[Share]]
    cheaters: dict[str, str]  # responder -> what it was caught at


def holder_indices(params: SecAggParams, keys: Mapping[str, AdvertiseKeys], owner: str) -> dict[str, int]:
    """holder -> the share index `owner` gave it (1-based rank in `owner`'s sorted roster)."""
    roster = sorted(v for v in params.neighbours[owner] if v in keys and v != owner)
    return {holder: i for i, holder in enumerate(roster, 1)}


@functools.lru_cache(maxsize=4096)
def _lagrange_at(base: tuple[int, ...], x: int) -> tuple[int, ...]:
    """L_j(x) mod p for the Lagrange basis of the points `base` (cached: most secrets share one index set)."""
    out = []
    for j, xj in enumerate(base):
        num = den = 1
        for m, xm in enumerate(base):
            if m != j:
                num = num * (x - xm) % PRIME
                den = den * (xj - xm) % PRIME
        out.append(num * pow(den, -1, PRIME) % PRIME)
    return tuple(out)


def _on_one_polynomial(shares: Sequence[tuple[int, int]], t: int) -> bool:
    """All `shares` (x, y) over Z_p agree with the polynomial of degree < t through the first t."""
    base, rest = shares[:t], shares[t:]
    xs, ys = tuple(x for x, _ in base), [y for _, y in base]
    return all(sum(c * y for c, y in zip(_lagrange_at(xs, x), ys)) % PRIME == y_x for x, y_x in rest)


def _odd_one_out(shares: list[tuple[str, int, int]], t: int) -> str | None:
    """The sender of the one share whose removal leaves the rest on one polynomial (None: all agree already)."""
    points = [(x, y) for _, x, y in shares]
    if len(points) <= t or _on_one_polynomial(points, t):
        return None
    if len(points) >= t + 2:
        for k, (sender, _, _) in enumerate(shares):
            if _on_one_polynomial(points[:k] + points[k + 1 :], t):
                return sender
    raise SecAggAborted(
        f"the {len(points)} shares of one secret do not lie on one polynomial and no single share explains it"
    )


def _broken_commitment(state: SecAggServerState, r: UnmaskResponse) -> str | None:
    """What is wrong with `r`'s revealed shares against their dealers' commitments (None: every one opens)."""
    rid, holder = state.params.round_id, r.client_id
    for kind, shares in ((KEY, r.key_shares), (SEED, r.seed_shares)):
        for owner, (index, value) in shares.items():
            pair = state.commitments.get(owner, {}).get(holder)
            if pair is None or not opens(
                pair[kind == SEED], rid, owner, holder, kind, index, value, r.salts.get(owner, b"")
            ):
                return f"its {kind} share of {owner} does not open {owner}'s commitment"
    return None


def trusted_shares(state: SecAggServerState, request: UnmaskRequest, key_owners: Sequence[str]) -> TrustedShares:
    """The checked shares of every survivor's self-mask seed and of each of `key_owners`' mask keys."""
    params, keys, responses = state.params, state.keys, state.responses
    t = params.threshold
    cheaters: dict[str, str] = {}
    indices: dict[str, dict[str, int]] = {}  # owner -> holder -> index, each roster sorted once
    for r in responses.values():
        for owner, (index, _) in [*r.seed_shares.items(), *r.key_shares.items()]:
            if owner not in indices:
                indices[owner] = holder_indices(params, keys, owner)
            if index != indices[owner].get(r.client_id):
                log.warning(
                    "secure aggregation: %s sent a share of %s under index %d, not its own; its shares are ignored",
                    r.client_id,
                    owner,
                    index,
                )
                cheaters[r.client_id] = f"it sent a share of {owner} under another holder's index {index}"
        if committed(params.scheme) and r.client_id not in cheaters and (why := _broken_commitment(state, r)):
            log.warning("secure aggregation: %s: %s; its shares are ignored", r.client_id, why)
            cheaters[r.client_id] = why
    while True:
        honest = [r for c, r in sorted(responses.items()) if c not in cheaters]
        seed = {u: [(r.client_id, *r.seed_shares[u]) for r in honest if u in r.seed_shares] for u in request.survivors}
        key = {v: [(r.client_id, *r.key_shares[v]) for r in honest if v in r.key_shares] for v in key_owners}
        caught = None
        if params.scheme in AES_SCHEMES and not committed(params.scheme):
            for owner, shares in [*seed.items(), *key.items()]:
                points = [(c, i, int.from_bytes(y, "big")) for c, i, y in shares]
                try:
                    caught = _odd_one_out(points, t)
                except SecAggAborted as e:
                    raise SecAggAborted(f"shares of {owner}'s secret: {e}") from None
                if caught is not None:
                    log.warning(
                        "secure aggregation: %s sent a share of %s off the polynomial the other %d agree "
                        "on; its shares are ignored",
                        caught,
                        owner,
                        len(shares) - 1,
                    )
                    break
        if caught is None:
            strip = lambda m: {o: [(i, y) for _, i, y in s] for o, s in m.items()}  # noqa: E731
            return TrustedShares(strip(seed), strip(key), cheaters)
        cheaters[caught] = "its share was off the polynomial the other shares agree on"


__all__ = ["TrustedShares", "holder_indices", "trusted_shares"]
