"""Hand-made zstd frames for the decoder's bad-input tests: `rle_bomb` declares one size and expands far past it.

Import explicitly: `from zstd_frames import rle_bomb`.
"""

from __future__ import annotations

import struct


def rle_bomb(declared: int, blocks: int, window_log: int = 13) -> bytes:
    """A zstd frame declaring `declared` bytes of content whose `blocks` RLE blocks regenerate a whole window
    (2**window_log bytes) each. A window smaller than the declared size makes zstd decode through a ring
    buffer, which never notices the frame outgrowing its declared size before the frame's end."""
    size = min(1 << window_log, 128 << 10)         # a block regenerates at most 128 KiB
    header = b"\x28\xb5\x2f\xfd" + bytes([0b1000_0000, (window_log - 10) << 3]) + struct.pack("<I", declared)
    block = struct.pack("<I", (size << 3) | (1 << 1))[:3] + b"\0"
    last = struct.pack("<I", (size << 3) | (1 << 1) | 1)[:3] + b"\0"
    return header + block * (blocks - 1) + last
