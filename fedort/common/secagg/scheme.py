"""Which secure-aggregation scheme a round computes with: the mask PRG and the Shamir field (protocol 1.3).

    chacha20-gf2^128   masks: ChaCha20 keystream; seeds shared over GF(2^128) (pycryptodome). The
                       scheme of fedort before protocol 1.3, and of any round whose parameters name none.
    aes128ctr-p130     masks: AES-128-CTR keystream; seeds shared over Z_p, p = 2^130 − 5 (`shamirs`).
                       Faster masks (AES-NI) and much cheaper sharing than pure-Python GF(2^128).
    aes128ctr32-p130   as aes128ctr-p130, but when b ≤ 32 the keystream is read as 32-bit words (not 64):
                       half the keystream and half the memory traffic per mask, as uniform mod 2^b
                       (2^b divides 2^32); b > 32 reads 64-bit words as before. Same key, field, shares.
    aes128ctr32-p130-commit  as aes128ctr32-p130, with commitments (protocol 1.8, `commit.py`): each
                       share a dealer seals is committed to (salted SHA-256) and so is its self-mask
                       seed b; the coordinator relays the commitments with the sealed bundles, a holder
                       checks its shares against them, and the coordinator checks every revealed share
                       and every rebuilt b, so a lying holder or dealer is identified.

Both sides must compute the same masks and shares, or the coordinator would unmask a wrong sum
without noticing. So the scheme is negotiated: a device announces the schemes it can run in its
Join capabilities (`secagg_schemes`, comma-separated); the coordinator picks the newest scheme
every selected device announced (the legacy one if any announces none), names it in the round's
`SecAggParams.scheme`, and each device echoes it in its `AdvertiseKeys`. A device whose echo
differs (an older device under a newer scheme) is refused with FAILED_PRECONDITION before it
joins the protocol; a device asked for a scheme it does not know refuses the round itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fedort.common.secagg.errors import SchemeError

LEGACY = "chacha20-gf2^128"
AES_PRIME = "aes128ctr-p130"
AES_PRIME_W32 = "aes128ctr32-p130"
COMMITTED = "aes128ctr32-p130-commit"
SUPPORTED = (COMMITTED, AES_PRIME_W32, AES_PRIME, LEGACY)  # newest first: what this build computes
AES_SCHEMES = (COMMITTED, AES_PRIME_W32, AES_PRIME)  # AES-128-CTR masks, Shamir over Z_p
WORDS_32 = (COMMITTED, AES_PRIME_W32)  # mask words of 32 bits when b <= 32
CAPABILITY = "secagg_schemes"  # Join capability listing a device's schemes
_NEEDS = {
    COMMITTED: "fedort protocol >= 1.8 (aes128ctr32-p130 with commitments to the shares and seeds)",
    AES_PRIME_W32: "fedort protocol >= 1.3 with 32-bit mask words (AES-128-CTR, shares mod 2^130 - 5)",
    AES_PRIME: "fedort protocol >= 1.3 (AES-128-CTR masks, Shamir shares mod 2^130 - 5)",
    LEGACY: "fedort protocol 1.0-1.2 secure aggregation (ChaCha20 masks, Shamir over GF(2^128))",
}


def announced(capabilities: Mapping[str, str]) -> tuple[str, ...]:
    """The schemes a device listed at Join (none: a device before protocol 1.3, which runs the legacy one)."""
    listed = tuple(s.strip() for s in capabilities.get(CAPABILITY, "").split(",") if s.strip())
    return listed or (LEGACY,)


def negotiate(devices: Iterable[Mapping[str, str]]) -> str:
    """The newest scheme this build runs that every device (its Join capabilities) announced."""
    common = set(SUPPORTED)
    for caps in devices:
        common &= set(announced(caps))
    return next((s for s in SUPPORTED if s in common), LEGACY)


def require_known(scheme: str) -> str:
    """`scheme` if this build computes it, else SchemeError (FAILED_PRECONDITION) naming what it supports."""
    if scheme not in SUPPORTED:
        raise SchemeError(
            f"secure-aggregation scheme {scheme!r} is not supported by this fedort "
            f"(it runs {', '.join(SUPPORTED)}); update the device"
        )
    return scheme


def check_echo(round_scheme: str, echoed: str, client_id: str) -> None:
    """The coordinator's check of a device's AdvertiseKeys: it must compute this round's scheme.

    An empty echo is a device before protocol 1.3: it can only have computed the legacy scheme."""
    computes = echoed or LEGACY
    if computes != round_scheme:
        raise SchemeError(
            f"client {client_id} computes secure-aggregation scheme {computes!r}"
            f"{' (it named none: a device before protocol 1.3)' if not echoed else ''}, but this round uses "
            f"{round_scheme!r}: it needs {_NEEDS.get(round_scheme, round_scheme)}; its masks would not cancel, "
            f"so it is left out of the round"
        )


def committed(scheme: str) -> bool:
    """Whether `scheme` commits to its shares and seeds (a cheating holder or dealer is identified)."""
    return scheme == COMMITTED


def share_bytes(scheme: str) -> int:
    """The length of one Shamir share value in `scheme`'s field (17 bytes mod 2^130 − 5, 16 in GF(2^128))."""
    return 17 if require_known(scheme) in AES_SCHEMES else 16


def split_secret(scheme: str, secret: bytes, threshold: int, holders: int) -> list[tuple[int, bytes]]:
    """Shamir shares of a 16-byte seed in `scheme`'s field (index 1..holders)."""
    if require_known(scheme) in AES_SCHEMES:
        from fedort.common.secagg import shamir_prime

        return shamir_prime.split_secret(secret, threshold, holders)
    from fedort.common.secagg import shamir

    return shamir.split_secret(secret, threshold, holders)


def combine_secrets(scheme: str, share_lists, threshold: int) -> list[bytes]:
    """The 16-byte seeds from their shares (>= `threshold` distinct each) in `scheme`'s field."""
    if require_known(scheme) in AES_SCHEMES:
        from fedort.common.secagg import shamir_prime

        return shamir_prime.combine_secrets(share_lists, threshold)
    from fedort.common.secagg import shamir

    return shamir.combine_secrets(share_lists, threshold)
