"""The mask generator: a 32-byte seed expanded to a uniform vector mod 2^b with a stream cipher.

The round's scheme (`scheme.py`) names the cipher: ChaCha20 (legacy; key = seed, a fixed all-zero
nonce) or AES-128 in CTR mode (key = the seed's first 16 bytes, counter block starting at zero;
faster than ChaCha20 where the CPU has AES instructions), both from `cryptography`. 128 bits of key
match the rest of the protocol: X25519 and the 16-byte self-mask seeds b_u. The keystream is read as
little-endian uint64 words (uint32 words under aes128ctr32-p130 when b ≤ 32: `word_bytes`) and
reduced mod 2^b by masking the low bits, which keeps the result uniform because 2^b divides 2^64
(2^32). A fixed nonce is safe because every seed is used for one
mask only: seeds are fresh per round (self masks) or derived per round and pair (pairwise masks).

`MaskAdder` adds (or subtracts) many such masks into one uint64 accumulator without allocating:
the keystream is written block by block (256 KiB: it stays in cache) into a reused buffer (`update_into`; the
stream continues across blocks) and added in place, and the reduction mod 2^b is left to the
caller, once at the end — exact, since 2^b divides 2^64, so sums of unreduced words agree with
sums of reduced ones mod 2^b. (A fresh 8·P-byte buffer per mask, as `expand` makes, costs more in
page faults than the cipher itself.) The block buffers are borrowed for each add
(`fedort.common.scratch`), so a host of many devices does not map fresh pages for each.
`MaskAdder.assign` writes the first mask straight into an accumulator (no zeroing, no add).
Where the words are 4 bytes (b ≤ 32) the accumulator may be
uint32 (`accumulator_dtype`): sums mod 2^32 are as exact mod 2^b, and the adds need no widening
(half the memory traffic of masks into uint64).
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from fedort.common.errors import ConfigError
from fedort.common.scratch import scratch
from fedort.common.secagg.scheme import AES_SCHEMES, LEGACY, WORDS_32, require_known

SEED_BYTES = 32
_NONCE = bytes(16)


def _check(seed: bytes, bits: int) -> None:
    if len(seed) != SEED_BYTES:
        raise ConfigError(f"mask seed must be {SEED_BYTES} bytes, got {len(seed)}")
    if not 1 <= bits <= 64:
        raise ConfigError(f"mask bits must be in [1, 64], got {bits}")


def _keystream(seed: bytes, scheme: str):
    """The keystream encryptor of `seed` in `scheme` (encrypting zeros yields the keystream)."""
    if require_known(scheme) in AES_SCHEMES:
        return Cipher(algorithms.AES(seed[:16]), modes.CTR(_NONCE)).encryptor()
    return Cipher(algorithms.ChaCha20(seed, _NONCE), mode=None).encryptor()


def word_bytes(scheme: str, bits: int) -> int:
    """Keystream bytes per mask word: 4 under aes128ctr32-p130 (and its committed variant) with b ≤ 32, else 8."""
    return 4 if scheme in WORDS_32 and bits <= 32 else 8


def expand(seed: bytes, length: int, bits: int, scheme: str = LEGACY) -> np.ndarray:
    """`length` pseudo-random integers in [0, 2^bits) as uint64, determined by `seed` (and the scheme)."""
    _check(seed, bits)
    encryptor = _keystream(seed, scheme)
    width = word_bytes(scheme, bits)
    stream = encryptor.update(bytes(width * length))
    words = np.frombuffer(stream, dtype=f"<u{width}").astype(np.uint64, copy=True)
    words &= np.uint64((1 << bits) - 1)
    return words


def accumulator_dtype(scheme: str, bits: int) -> type[np.unsignedinteger]:
    """The narrowest exact accumulator of masks: uint32 for 4-byte words (then 2^b divides 2^32), else uint64."""
    return np.uint32 if word_bytes(scheme, bits) == 4 else np.uint64


BLOCK_WORDS = 1 << 15  # 256 KiB of keystream at a time (a larger block falls out of cache)
_ZEROS = memoryview(bytes(8 * BLOCK_WORDS))  # the plaintext whose encryption is the keystream (never written)
_SLACK = 64  # some versions of `update_into` want len(data) + block - 1 bytes of room
_BLOCK_BYTES = 8 * BLOCK_WORDS + _SLACK  # one block of keystream (`fedort.common.scratch`)


class MaskAdder:
    """acc ± expand(seed, len(acc), bits), mod 2^64 (mod 2^32 in a uint32 `acc`), for many seeds, with
    block buffers of ≤ 256 KiB shared by the process's adders.

    The caller reduces `acc` mod 2^b (`acc &= 2^b - 1`) once after the last `add`.
    """

    def __init__(self, length: int, block: int = BLOCK_WORDS, scheme: str = LEGACY) -> None:
        self.length, self.block, self.scheme = length, max(1, min(block, length, BLOCK_WORDS)), require_known(scheme)

    def _checked(self, acc: np.ndarray, seed: bytes, bits: int) -> int:
        """The word width of `acc`'s masks; ConfigError unless `acc` can hold them."""
        _check(seed, bits)
        width = word_bytes(self.scheme, bits)
        allowed = (np.uint64, np.uint32) if width == 4 else (np.uint64,)
        if acc.dtype not in allowed or acc.shape != (self.length,):
            raise ConfigError(
                f"mask accumulator must be {' or '.join(np.dtype(t).name for t in allowed)} of shape "
                f"({self.length},), got {acc.dtype} {acc.shape}"
            )
        return width

    def add(self, acc: np.ndarray, seed: bytes, sign: int, bits: int) -> None:
        """acc += sign · PRG(seed) (mod 2^64, hence mod 2^bits once reduced)."""
        width = self._checked(acc, seed, bits)
        encryptor = _keystream(seed, self.scheme)
        op = np.add if sign > 0 else np.subtract
        with scratch(_BLOCK_BYTES) as buf:
            words = np.frombuffer(buf, dtype=f"<u{width}", count=self.block)
            for start in range(0, self.length, self.block):
                n = min(self.block, self.length - start)
                encryptor.update_into(_ZEROS[: width * n], buf)
                part = acc[start : start + n]
                op(part, words[:n], out=part)

    def assign(self, acc: np.ndarray, seed: bytes, bits: int) -> None:
        """acc = PRG(seed) (what `add` with sign +1 makes of a zeroed `acc`), without zeroing it first: where the
        words fill `acc`'s items, the keystream is written straight into it, else widened into it."""
        width = self._checked(acc, seed, bits)
        if width != acc.dtype.itemsize or not acc.flags.c_contiguous:
            acc[...] = 0
            self.add(acc, seed, 1, bits)
            return
        encryptor = _keystream(seed, self.scheme)
        out = acc.data.cast("B")
        with scratch(_BLOCK_BYTES) as buf:
            for start in range(0, self.length, self.block):
                n = min(self.block, self.length - start)
                room = out[width * start :]
                if len(room) >= width * n + _SLACK:
                    encryptor.update_into(_ZEROS[: width * n], room)
                else:  # the last block: through the buffer, which has the room
                    encryptor.update_into(_ZEROS[: width * n], buf)
                    room[: width * n] = memoryview(buf)[: width * n]
