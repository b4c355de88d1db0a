"""Commitments of scheme `aes128ctr32-p130-commit`: what lets the coordinator tell a lying member.

    share commitment  C = SHA-256(header ‖ value ‖ salt), header = JSON ["fedort-secagg-commit",
                      round id, dealer, holder, kind ("key" | "seed"), index] and a newline;
                      value: the 17-byte share, salt: 16 random bytes sealed to the holder with it
    seed digest       D = SHA-256(JSON ["fedort-secagg-seed", round id, dealer] ‖ newline ‖ b)

A dealer sends C for every share it seals (beside the sealed bundle, which carries the salts) and D
of its self-mask seed b. The coordinator relays each holder the commitments of its own shares, and
the holder checks them when it opens the bundle (a dealer that commits to something else than it
sealed is reported by the holder, so it cannot frame an honest holder later). At unmasking a holder
reveals share and salt; a share that does not open its commitment names its holder, and a rebuilt
b whose digest differs names its dealer. SHA-256 binds (no second value opens C) and the salt
hides a share from the coordinator until it is revealed; b is 128 random bits, so D hides it.
"""

from __future__ import annotations

import hashlib
import hmac

from fedort.common.secagg.labels import label

SALT_BYTES = 16
DIGEST_BYTES = 32
KEY, SEED = "key", "seed"


def share_commitment(
    round_id: int, dealer: str, holder: str, kind: str, index: int, value: bytes, salt: bytes
) -> bytes:
    """C for the share `value` (index `index`, of the dealer's `kind` secret) that `dealer` gave `holder`."""
    header = label("fedort-secagg-commit", round_id, dealer, holder, kind, index)
    return hashlib.sha256(header + b"\n" + value + salt).digest()


def opens(
    commitment: bytes, round_id: int, dealer: str, holder: str, kind: str, index: int, value: bytes, salt: bytes
) -> bool:
    """Whether (index, value, salt) is what `commitment` was made to (constant-time comparison)."""
    if len(salt) != SALT_BYTES or len(commitment) != DIGEST_BYTES:
        return False
    return hmac.compare_digest(commitment, share_commitment(round_id, dealer, holder, kind, index, value, salt))


def seed_digest(round_id: int, dealer: str, seed: bytes) -> bytes:
    """D of `dealer`'s self-mask seed b in this round."""
    return hashlib.sha256(label("fedort-secagg-seed", round_id, dealer) + b"\n" + seed).digest()


__all__ = ["DIGEST_BYTES", "KEY", "SALT_BYTES", "SEED", "opens", "seed_digest", "share_commitment"]
