"""`zstd+X`: the payload of codec X compressed as one zstd frame (level 3). Lossless on top of X.

The error bound, the delta convention and the layout inside are X's. The frame must declare its
content size (we always write it) and that size must equal X's exact payload size for the
header's length, and the decoder holds the frame to it: it reads the block headers as bytes
arrive, hands zstd at most about SEGMENT_OUTPUT bytes' worth of blocks per call, and refuses the
frame as soon as the output passes the declared size, so a frame that lies about its size (a
decompression bomb of RLE blocks) costs no more than an honest one. Frames whose window exceeds
MAX_WINDOW are refused (our level-3 frames use at most 2 MiB). The frame carries zstd's content
checksum. Truncated, corrupt or trailing bytes raise VectorError. Memory: zstd's window
(≤ MAX_WINDOW) plus one `feed`'s decoded pieces, never more than X's payload for the vector.

Pays where X's bytes are redundant: int8 codes and top-k indices shrink, float mantissas
(raw, fp16, bf16) barely — see benchmarks/README.md "Codecs".
"""

from __future__ import annotations

import numpy as np
import zstandard

from fedort.common.errors import VectorError
from fedort.common.invariants import present
from fedort.protos.update_codecs.base import Codec, StreamDecoder

LEVEL = 3
FRAME_HEADER_MAX = 18
BLOCK_MAX = 128 << 10  # zstd's largest block, raw, RLE or compressed (its regenerated size)
SEGMENT_OUTPUT = 1 << 20  # at most about this many output bytes per call into zstd
MAX_WINDOW = 8 << 20  # the largest window a frame may ask for (zstd levels ≤ 19 stay within it)


def max_compressed_size(inner_bytes: int) -> int:
    """An upper bound of a zstd frame for `inner_bytes` of input (zstd's ZSTD_COMPRESSBOUND, rounded up)."""
    return inner_bytes + (inner_bytes >> 7) + 1024


class ZstdCodec(Codec):
    def __init__(self, spec, inner: Codec) -> None:
        super().__init__(spec)
        self.inner = inner

    def payload_size(self, length: int) -> None:
        return None

    def encode(self, vector: np.ndarray, rng: np.random.Generator | None = None, *, level: int = LEVEL) -> bytes:
        inner = self.inner.encode(vector, rng)
        return zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True).compress(inner)

    def _decoder(self, length: int, payload_bytes: int) -> StreamDecoder:
        inner_bytes = present(self.inner.payload_size(length), "the inner codec's payload size")
        if not 0 < payload_bytes <= max_compressed_size(inner_bytes):
            raise VectorError(
                f"{self.spec} payload for {length} values must be 1..{max_compressed_size(inner_bytes)} "
                f"bytes, header says {payload_bytes}"
            )
        return _ZstdDecoder(self.spec, length, payload_bytes, self.inner.decoder(length), inner_bytes)


class _ZstdDecoder(StreamDecoder):
    def __init__(self, spec, length: int, payload_bytes: int, inner: StreamDecoder, inner_bytes: int) -> None:
        super().__init__(spec, length, payload_bytes)
        self.inner = inner
        self.inner_bytes = inner_bytes
        self._prefix = b""
        self._obj: zstandard.ZstdDecompressionObj | None = None
        self._blocks: _BlockScan | None = None
        self._out = 0

    def feed(self, chunk: bytes | memoryview) -> list:
        n = len(chunk)
        if self.received + n > self.payload_bytes:
            raise VectorError(
                f"{self.spec} payload must be {self.payload_bytes} bytes as its header says; "
                f"received at least {self.received + n}"
            )
        self.received += n
        data = bytes(chunk)
        if self._obj is None:
            self._prefix += data
            if len(self._prefix) < FRAME_HEADER_MAX and self.received < self.payload_bytes:
                return []
            data, self._prefix = self._prefix, b""
            self._open(data)
        elif self._obj.eof:
            raise VectorError(f"{self.spec} payload has {n} bytes after the end of its zstd frame")
        pieces: list = []
        obj, blocks = (
            present(self._obj, "the zstd frame's decompressor"),
            present(self._blocks, "the frame's block scan"),
        )
        for segment in blocks.segments(memoryview(data)):
            try:
                out = obj.decompress(segment)
            except zstandard.ZstdError as e:
                raise VectorError(f"{self.spec} payload: corrupt zstd frame ({e})") from None
            self._out += len(out)
            if self._out > self.inner_bytes:
                raise VectorError(
                    f"{self.spec} payload: zstd frame decompresses to more than the "
                    f"{self.inner_bytes} bytes it declares"
                )
            if obj.eof and obj.unused_data:
                raise VectorError(
                    f"{self.spec} payload has {len(obj.unused_data)} bytes after the end of its zstd frame"
                )
            if out:
                pieces += self.inner.feed(out)
        return pieces

    def _open(self, head: bytes) -> None:
        try:
            params = zstandard.get_frame_parameters(head)
        except zstandard.ZstdError as e:
            raise VectorError(f"{self.spec} payload does not start with a zstd frame header ({e})") from None
        if params.content_size != self.inner_bytes:
            declared = "no size" if params.content_size == zstandard.CONTENTSIZE_UNKNOWN else params.content_size
            raise VectorError(
                f"{self.spec} payload: zstd frame must declare {self.inner_bytes} bytes of content "
                f"for {self.length} values, it declares {declared}"
            )
        if params.window_size > MAX_WINDOW:
            raise VectorError(
                f"{self.spec} payload: zstd frame asks for a {params.window_size}-byte window, "
                f"at most {MAX_WINDOW} is accepted"
            )
        self._obj = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW).decompressobj()
        self._blocks = _BlockScan(self.spec, zstandard.frame_header_size(head), checksum=params.has_checksum)

    def finish(self) -> list:
        super().finish()
        if self._obj is None or not self._obj.eof:
            raise VectorError(
                f"{self.spec} payload: truncated or corrupt zstd frame (the frame did not end "
                f"within the {self.payload_bytes} bytes the header declares)"
            )
        return self.inner.finish()


class _BlockScan:
    """The block structure of one zstd frame, read as its bytes arrive, to cut the input into segments
    that each regenerate at most about SEGMENT_OUTPUT bytes (a block regenerates at most BLOCK_MAX)."""

    def __init__(self, spec, header_bytes: int, checksum: bool) -> None:
        self.spec = spec
        self.skip = header_bytes  # bytes before the next block header (frame header, block content, checksum)
        self.head = b""  # a block header split across chunks
        self.ended = False  # the last block's header was read
        self.checksum = 4 if checksum else 0

    def segments(self, data: memoryview):
        start = pos = bound = 0
        n = len(data)
        while pos < n:
            if self.skip:
                step = min(self.skip, n - pos)
                pos += step
                self.skip -= step
                continue
            if self.ended:
                raise VectorError(f"{self.spec} payload has {n - pos} bytes after the end of its zstd frame")
            if bound >= SEGMENT_OUTPUT:
                yield data[start:pos]
                start, bound = pos, 0
            part = bytes(data[pos : pos + 3 - len(self.head)])
            self.head += part
            pos += len(part)
            if len(self.head) < 3:
                break
            word = int.from_bytes(self.head, "little")
            self.head = b""
            kind, size = (word >> 1) & 3, word >> 3
            if kind == 3 or size > BLOCK_MAX:
                raise VectorError(
                    f"{self.spec} payload: corrupt zstd frame (block of type {kind} and size {size}; "
                    f"types are 0-2 and sizes at most {BLOCK_MAX})"
                )
            self.skip = 1 if kind == 1 else size
            bound += BLOCK_MAX if kind == 2 else size
            if word & 1:
                self.ended = True
                self.skip += self.checksum
        if start < n:
            yield data[start:n]
