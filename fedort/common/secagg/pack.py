"""The masked upload's wire formats: `secagg-u64` (8 bytes a word) and `secagg-packed:B` (b/8 bytes a word).

A masked word lies in [0, 2^b). `secagg-u64` sends each as a little-endian uint64 — 8·(P + 1)
bytes, twice a float32 update. `secagg-packed:b` (b a multiple of 8, which the coordinator makes
it by rounding the modulus up to whole bytes when it opens the round) sends only the low b/8
bytes of each word, little-endian: (b/8)·(P + 1) bytes, e.g. 5 bytes a value at b = 40, 4 (the
size of float32) at b ≤ 32. Every b/8-byte string is a valid word below 2^b, so a packed
payload can be malformed only in its size (or in naming another b than the round's).
"""

from __future__ import annotations

import numpy as np

from fedort.common.errors import VectorError

U64_CODEC = "secagg-u64"
PACKED_FAMILY = "secagg-packed"


def packed_codec(bits: int) -> str:
    """The codec spec of words packed to `bits` bits (a multiple of 8 in 8..64)."""
    return f"{PACKED_FAMILY}:{packed_bits(f'{PACKED_FAMILY}:{bits}')}"


def packed_bits(spec: str) -> int:
    """b of a `secagg-packed:b` spec; VectorError (INVALID_ARGUMENT) unless b is a multiple of 8 in 8..64."""
    family, _, arg = spec.partition(":")
    try:
        bits = int(arg)
    except ValueError:
        bits = -1
    if family != PACKED_FAMILY or not arg.isdigit() or bits % 8 or not 8 <= bits <= 64:
        raise VectorError(
            f"a packed masked upload's codec is '{PACKED_FAMILY}:b' with b a multiple of 8 in "
            f"8..64 (bits per masked word), got {spec!r}"
        )
    return bits


def is_masked(codec: str) -> bool:
    """Whether `codec` names a masked (secure-aggregation) upload: secagg-u64 or secagg-packed:b."""
    return codec == U64_CODEC or codec.partition(":")[0] == PACKED_FAMILY


def payload_size(codec: str, length: int) -> int:
    """Bytes of a masked payload of a length-P model (P values and the weight): 8·(P+1) or (b/8)·(P+1)."""
    width = 8 if codec == U64_CODEC else packed_bits(codec) // 8
    return width * (length + 1)


def pack(words: np.ndarray, codec: str) -> bytes:
    """The payload of masked `words` (each below 2^b; uint64, or uint32 when b ≤ 32) in `codec`."""
    width = 8 if codec == U64_CODEC else packed_bits(codec) // 8
    words = np.asarray(words)
    if width > 4:
        words = np.ascontiguousarray(words, dtype="<u8")
        return words.tobytes() if width == 8 else _low_bytes(words, width).tobytes()
    narrow = np.ascontiguousarray(words, dtype="<u4")  # every word is below 2^b ≤ 2^32
    if width == 3:
        return _three_bytes(narrow)
    return narrow.astype({1: "u1", 2: "<u2", 4: "<u4"}[width], copy=False).tobytes()


def add_packed(acc: np.ndarray, payload: bytes | memoryview | np.ndarray, codec: str, length: int) -> None:
    """acc += the P + 1 words of a payload in `codec`, mod 2^64, in a uint64 `acc` (VectorError if the payload's
    size is not the codec's). The words are read straight from the payload: each packed word as the 8 bytes
    from its start, so the bytes of the next words ride along above bit 8·(b/8) — added there, they vanish
    when the caller reduces the sum mod 2^b (b = 8·(b/8), as the round makes it), and no unpacked copy is made."""
    raw = _bytes_of(payload)
    expected = payload_size(codec, length)
    if raw.nbytes != expected:
        raise VectorError(
            f"{codec} update holds {raw.nbytes} bytes, expected {expected} for {length} values and the weight"
        )
    if acc.dtype != np.uint64 or acc.shape != (length + 1,):
        raise VectorError(f"masked words are summed in uint64 of shape ({length + 1},), got {acc.dtype} {acc.shape}")
    width = expected // (length + 1)
    if width == 8:
        np.add(acc, raw.view("<u8"), out=acc)
        return
    whole = (raw.nbytes - 8) // width + 1 if raw.nbytes >= 8 else 0  # words whose 8 bytes lie inside the payload
    if whole:
        head = np.ndarray(shape=(whole,), dtype="<u8", buffer=raw, strides=(width,))
        np.add(acc[:whole], head, out=acc[:whole])
    if whole < length + 1:  # the last few words: from a copy with room after them
        tail = np.zeros((length + 1 - whole) * width + 8, dtype=np.uint8)
        tail[: raw.nbytes - whole * width] = raw[whole * width :]
        words = np.ndarray(shape=(length + 1 - whole,), dtype="<u8", buffer=tail, strides=(width,))
        np.add(acc[whole:], words, out=acc[whole:])


def _bytes_of(payload: bytes | memoryview | np.ndarray) -> np.ndarray:
    """A payload as a flat uint8 array (a view where it can be)."""
    if isinstance(payload, np.ndarray):
        return np.ascontiguousarray(payload).view(np.uint8).reshape(-1)
    return np.frombuffer(payload, dtype=np.uint8)


def _three_bytes(words: np.ndarray) -> bytes:
    """Words below 2^24 as 3 little-endian bytes each: every 4 words become 3 uint32s by shifts and ors
    (faster than copying 3-byte items one by one), the last 0-3 words as items."""
    whole = len(words) // 4
    out = np.empty(3 * len(words), dtype=np.uint8)
    body = out[: 12 * whole].view("<u4").reshape(whole, 3)
    a, b, c, d = (words[: 4 * whole].reshape(whole, 4)[:, i] for i in range(4))
    np.left_shift(b, 24, out=body[:, 0])
    body[:, 0] |= a
    np.left_shift(c, 16, out=body[:, 1])
    body[:, 1] |= b >> 8
    np.left_shift(d, 8, out=body[:, 2])
    body[:, 2] |= c >> 16
    out[12 * whole :] = np.frombuffer(_low_bytes(words[4 * whole :], 3).tobytes(), dtype=np.uint8)
    return out.tobytes()


def unpack(payload: bytes | memoryview | np.ndarray, codec: str, length: int) -> np.ndarray:
    """The P + 1 masked uint64 words of a payload in `codec` (VectorError if its size is not the codec's)."""
    raw = _bytes_of(payload)
    expected = payload_size(codec, length)
    if raw.nbytes != expected:
        raise VectorError(
            f"{codec} update holds {raw.nbytes} bytes, expected {expected} for {length} values and the weight"
        )
    if codec == U64_CODEC:
        return raw.view("<u8")
    width = expected // (length + 1)
    # one padded copy, read as overlapping little-endian uint64 at a stride of b/8 bytes, high bytes cut
    # (faster than copying b/8-byte items into zeroed words)
    padded = np.zeros(raw.nbytes + 8, dtype=np.uint8)
    padded[: raw.nbytes] = raw
    words = np.ndarray(shape=(length + 1,), dtype="<u8", buffer=padded, strides=(width,))
    return words & np.uint64((1 << (8 * width)) - 1)


def _low_bytes(words: np.ndarray, width: int) -> np.ndarray:
    """The low `width` bytes of each little-endian word of `words` as one `width`-byte item each (a view:
    copying it moves one item per word, not `width` single bytes)."""
    return np.ndarray(shape=words.shape, dtype=f"V{width}", buffer=words, strides=(words.dtype.itemsize,))
