"""Key agreement and share encryption: X25519 + HKDF-SHA256 and ChaCha20-Poly1305 (`cryptography`).

Each client holds two X25519 key pairs per round, as in Bonawitz et al.: the *c* pair derives
the AEAD keys that encrypt the Shamir shares it sends to a neighbour through the coordinator,
the *s* pair derives the pairwise mask seeds; it comes from a 16-byte seed (`from_seed`) so that
its Shamir shares are as small as pycryptodome's 16-byte sharing allows. `agree` binds the derived key to the round and the
purpose through HKDF's `info`, so one Diffie-Hellman result never yields the same key twice.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedort.common.secagg.errors import SecAggError

KEY_BYTES = 32
SEED_BYTES = 16
_NONCE_BYTES = 12
_RAW: dict[str, Any] = dict(encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw)


@dataclass(frozen=True)
class KeyPair:
    """An X25519 key pair as raw 32-byte strings (the private half never leaves its owner,
    except as Shamir shares of it), and the key object they came from (an `Agreement` of this pair
    need not rebuild it, which costs about as much as an exchange)."""

    private: bytes
    public: bytes
    key: X25519PrivateKey | None = field(default=None, compare=False, repr=False)

    def private_key(self) -> X25519PrivateKey:
        """The private half as a key object: the one it came from, else built from its bytes."""
        return self.key if self.key is not None else X25519PrivateKey.from_private_bytes(self.private)

    @classmethod
    def generate(cls) -> KeyPair:
        return cls._of(X25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> KeyPair:
        """The key pair derived from a 16-byte seed (HKDF-SHA256): what the mask key is, so that
        only the 16-byte seed needs Shamir sharing."""
        if len(seed) != SEED_BYTES:
            raise SecAggError(f"key seed must be {SEED_BYTES} bytes, got {len(seed)}")
        raw = derive(seed, b"fedort-secagg x25519 mask key")
        return cls._of(X25519PrivateKey.from_private_bytes(raw))

    @classmethod
    def _of(cls, key: X25519PrivateKey) -> KeyPair:
        return cls(
            key.private_bytes(
                serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
            ),
            key.public_key().public_bytes(**_RAW),
            key,
        )


def derive(seed: bytes, info: bytes) -> bytes:
    """32 bytes from a seed: HKDF-SHA256 with `info` (expands 16-byte seeds into keys)."""
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(seed)


def public_of(private: bytes) -> bytes:
    """The public key of a raw X25519 private key (checks a reconstructed secret)."""
    return X25519PrivateKey.from_private_bytes(private).public_key().public_bytes(**_RAW)


def agree(private: bytes, peer_public: bytes, info: bytes) -> bytes:
    """32 bytes shared by the two key owners: HKDF-SHA256(X25519(private, peer_public), info)."""
    try:
        secret = X25519PrivateKey.from_private_bytes(private).exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError as exc:  # wrong length or a small-order point (all-zero shared secret)
        raise SecAggError(f"X25519 key agreement refused the peer's public key: {exc}") from exc
    return derive(secret, info)


_PROBE = X25519PrivateKey.generate()  # an exchange with it tells a usable public key from a small-order one


def check_public(public: bytes, what: str) -> None:
    """SecAggError unless `public` is a usable X25519 public key: 32 bytes, not a small-order point (whose
    agreement with any key is all zeros). The coordinator checks every advertised key, so no device's key
    agreement with a neighbour can fail on a key a malicious member chose."""
    try:
        _PROBE.exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError as exc:
        raise SecAggError(f"{what} is not a usable X25519 public key ({len(public)} bytes): {exc}") from None


class Agreement:
    """`agree` for one private key against many peers: the key object is built once (building it
    costs about as much as an exchange) and each peer's X25519 result is kept for further `info`s."""

    def __init__(self, private: bytes | KeyPair) -> None:
        self._key = (
            private.private_key() if isinstance(private, KeyPair) else X25519PrivateKey.from_private_bytes(private)
        )
        self._shared: dict[bytes, bytes] = {}

    def key(self, peer_public: bytes, info: bytes) -> bytes:
        """agree(private, peer_public, info)."""
        secret = self._shared.get(peer_public)
        if secret is None:
            try:
                secret = self._key.exchange(X25519PublicKey.from_public_bytes(peer_public))
            except ValueError as exc:
                raise SecAggError(f"X25519 key agreement refused the peer's public key: {exc}") from exc
            self._shared[peer_public] = secret
        return derive(secret, info)


def seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """ChaCha20-Poly1305 encryption; the random 12-byte nonce is prepended to the ciphertext."""
    nonce = os.urandom(_NONCE_BYTES)
    return nonce + ChaCha20Poly1305(key).encrypt(nonce, plaintext, aad)


def open_sealed(key: bytes, ciphertext: bytes, aad: bytes) -> bytes:
    """Inverse of `seal`; a tampered, misrouted or truncated ciphertext raises SecAggError."""
    if len(ciphertext) < _NONCE_BYTES + 16:
        raise SecAggError(f"sealed share too short: {len(ciphertext)} bytes")
    try:
        return ChaCha20Poly1305(key).decrypt(ciphertext[:_NONCE_BYTES], ciphertext[_NONCE_BYTES:], aad)
    except InvalidTag as exc:
        raise SecAggError("sealed share failed authentication (tampered or sent to the wrong client)") from exc
