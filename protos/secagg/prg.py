"""The mask generator: a 32-byte seed expanded to a uniform vector mod 2^b with ChaCha20.

The keystream of ChaCha20 (from `cryptography`, key = seed, a fixed all-zero nonce) is read as
little-endian uint64 words and reduced mod 2^b by masking the low bits, which keeps the result
uniform because 2^b divides 2^64. A fixed nonce is safe because every seed is used for one
mask only: seeds are fresh per round (self masks) or derived per round and pair (pairwise masks).
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from fedort.protos.errors import ConfigError

SEED_BYTES = 32
_NONCE = bytes(16)


def expand(seed: bytes, length: int, bits: int) -> np.ndarray:
    """`length` pseudo-random integers in [0, 2^bits) as uint64, determined by `seed`."""
    if len(seed) != SEED_BYTES:
        raise ConfigError(f"mask seed must be {SEED_BYTES} bytes, got {len(seed)}")
    if not 1 <= bits <= 64:
        raise ConfigError(f"mask bits must be in [1, 64], got {bits}")
    encryptor = Cipher(algorithms.ChaCha20(seed, _NONCE), mode=None).encryptor()
    stream = encryptor.update(bytes(8 * length))
    words = np.frombuffer(stream, dtype="<u8").astype(np.uint64, copy=True)
    words &= np.uint64((1 << bits) - 1)
    return words
