"""`xor+zstd`, the download delta: the global vector against one the device has cached, lossless.

    payload = zstd( shuffle( bits(g_new) XOR bits(g_cached) ) )           (bits: the float32 as uint32)
    g_new   = bits⁻¹( XOR( unshuffle( unzstd(payload) ), bits(g_cached) ) )  exactly, bit for bit

`shuffle` groups the 1st bytes of every value, then the 2nd, ... : between rounds the sign, exponent
and high mantissa bits rarely change, so those planes are runs of zeros that zstd removes
(benchmarks/README.md, "Codecs").
The frame declares its content size, which must be 4P (no decompression bomb) and carries zstd's
checksum; the device still checks the rebuilt vector against Task.vector_sha256.
"""

from __future__ import annotations

import numpy as np
import zstandard

from fedort.common.errors import VectorError

DOWNLOAD_DELTA = "xor+zstd"
LEVEL = 3


def _bits(vector: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(vector, dtype="<f4").view("<u4")


def encode_download(vector: np.ndarray, base: np.ndarray) -> bytes:
    """The payload that turns `base` into `vector` (equal lengths, float32)."""
    if vector.shape != base.shape:
        raise VectorError(f"download delta: vector of {vector.shape} against a base of {base.shape}")
    planes = (_bits(vector) ^ _bits(base)).view(np.uint8).reshape(-1, 4).T
    return zstandard.ZstdCompressor(level=LEVEL, write_checksum=True, write_content_size=True).compress(
        np.ascontiguousarray(planes).tobytes()
    )


def decode_download(payload: bytes, base: np.ndarray) -> np.ndarray:
    """The vector `payload` encodes against `base`; VectorError for a corrupt or wrong-sized payload."""
    n = 4 * len(base)
    try:
        size = zstandard.get_frame_parameters(payload).content_size
        if size != n:
            raise VectorError(f"{DOWNLOAD_DELTA} payload declares {size} bytes of content, expected {n}")
        raw = zstandard.ZstdDecompressor().decompress(payload, max_output_size=n)
    except zstandard.ZstdError as e:
        raise VectorError(f"{DOWNLOAD_DELTA} payload is not a valid zstd frame ({e})") from None
    if len(raw) != n:
        raise VectorError(f"{DOWNLOAD_DELTA} payload holds {len(raw)} bytes, expected {n}")
    xor = np.frombuffer(raw, dtype=np.uint8).reshape(4, -1).T.copy().view("<u4").reshape(-1)
    return (xor ^ _bits(base)).view("<f4")


__all__ = ["DOWNLOAD_DELTA", "decode_download", "encode_download"]
