"""`zstd+X`: the payload of codec X compressed as one zstd frame (level 3). Lossless on top of X.

The error bound, the delta convention and the layout inside are X's. The frame must declare its
content size (we always write it) and that size must equal X's exact payload size for the
header's length, so a decoder knows before decompressing anything that the output is bounded
(no decompression bomb); the frame carries zstd's content checksum. Truncated, corrupt or
trailing bytes raise VectorError. Memory: one `feed` returns what its chunk decompresses to
(at most X's payload for the whole vector, typically a few chunks' worth), decoded by X's
streaming decoder as it goes.

Pays where X's bytes are redundant: int8 codes and top-k indices shrink, float mantissas
(raw, fp16, bf16) barely — see benchmarks/README.md "Codecs".
"""

from __future__ import annotations

import numpy as np
import zstandard

from fedort.common.invariants import present
from fedort.common.errors import VectorError
from fedort.protos.update_codecs.base import Codec, StreamDecoder

LEVEL = 3
FRAME_HEADER_MAX = 18


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
            raise VectorError(f"{self.spec} payload for {length} values must be 1..{max_compressed_size(inner_bytes)} "
                              f"bytes, header says {payload_bytes}")
        return _ZstdDecoder(self.spec, length, payload_bytes, self.inner.decoder(length), inner_bytes)


class _ZstdDecoder(StreamDecoder):
    def __init__(self, spec, length: int, payload_bytes: int, inner: StreamDecoder, inner_bytes: int) -> None:
        super().__init__(spec, length, payload_bytes)
        self.inner = inner
        self.inner_bytes = inner_bytes
        self._prefix = b""
        self._obj: zstandard.ZstdDecompressionObj | None = None

    def feed(self, chunk: bytes | memoryview) -> list:
        n = len(chunk)
        if self.received + n > self.payload_bytes:
            raise VectorError(f"{self.spec} payload must be {self.payload_bytes} bytes as its header says; "
                              f"received at least {self.received + n}")
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
        obj = present(self._obj, "the zstd frame's decompressor")
        try:
            out = obj.decompress(data)
        except zstandard.ZstdError as e:
            raise VectorError(f"{self.spec} payload: corrupt zstd frame ({e})") from None
        if obj.eof and obj.unused_data:
            raise VectorError(f"{self.spec} payload has {len(obj.unused_data)} bytes after the end of its "
                              f"zstd frame")
        return self.inner.feed(out) if out else []

    def _open(self, head: bytes) -> None:
        try:
            params = zstandard.get_frame_parameters(head)
        except zstandard.ZstdError as e:
            raise VectorError(f"{self.spec} payload does not start with a zstd frame header ({e})") from None
        if params.content_size != self.inner_bytes:
            declared = "no size" if params.content_size == zstandard.CONTENTSIZE_UNKNOWN else params.content_size
            raise VectorError(f"{self.spec} payload: zstd frame must declare {self.inner_bytes} bytes of content "
                              f"for {self.length} values, it declares {declared}")
        self._obj = zstandard.ZstdDecompressor().decompressobj()

    def finish(self) -> list:
        super().finish()
        if self._obj is None or not self._obj.eof:
            raise VectorError(f"{self.spec} payload: truncated or corrupt zstd frame (the frame did not end "
                              f"within the {self.payload_bytes} bytes the header declares)")
        return self.inner.finish()
