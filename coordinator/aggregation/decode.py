"""Stage 1, decode: the wire codec of an update -> its float32 values, by codec name.

    values = decoder_for(update.codec).decode(update.encoded(), length)        # v ∈ float32^P
    x = g + v  if decoder.delta  else  v                                      # the update itself

A decoder turns the payload bytes into the P float32 values the rest of the pipeline works on,
whole (`decode`), block by block (`blocks`) or as the codec's own pieces (`pieces`: dense runs or
sparse index/value pairs), so a codec that expands its payload (fp16, int8, top-k) streams into
the fold without holding P float32 values per client. A `delta` decoder's values are the
difference from the round's global vector g (the header's base_sha256 names g); `values`/`
reconstructed_blocks` below add g back for transforms and combiners that need the update itself.

Registry: by codec FAMILY — the spec up to its first ':' (`int8:1024` -> `int8`, `zstd+topk:0.01`
-> `zstd+topk`); `decoder_for(spec)` returns the family's decoder bound to that spec (`bind`).
A codec is one file that defines a `Decoder` subclass and registers it here with
`register_decoder` (imported by the package's `__init__`); admission accepts exactly the
registered families (`codecs()`) that the run allows.

Validation while spooling (admission's receiver): `stream(length, payload_bytes)` returns an
incremental decoder (`feed(chunk) -> pieces`, `finish() -> pieces`) that refuses a malformed
payload as it arrives. A decoder without one (`streams = False`) is validated once the payload is
spooled, by decoding it whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

import numpy as np

from fedort.common.errors import VectorError
from fedort.coordinator.aggregation.update import BLOCK, Blocks
from fedort.protos.update_codecs import DensePiece, Piece, SparsePiece


class PieceStream(Protocol):
    """An incremental decoder of one payload (protos.codecs.StreamDecoder satisfies it)."""

    def feed(self, chunk: bytes | memoryview) -> list[Piece]: ...

    def finish(self) -> list[Piece]: ...


class Decoder:
    """Payload bytes of one codec -> float32 values. Subclasses implement `decode`, `pieces` or `stream`."""

    codec = ""
    delta = False  # values are update − global vector (the header's base_sha256 names it)
    dense_float32 = False  # the payload IS the P values as little-endian float32 (spool combiners read it as is)
    streams = False  # `stream` validates chunk by chunk while spooling

    def bind(self, spec: str) -> Decoder:
        """The decoder of one spec of this family (parameterised families override this)."""
        return self

    def payload_bytes(self, length: int, declared: int) -> int:
        """The payload size a header may announce (`declared`; 0 = the codec's default); VectorError if impossible."""
        expected = 4 * length
        if declared not in (0, expected):
            raise VectorError(
                f"{self.codec} payload for {length} values must be {expected} bytes, header says {declared}"
            )
        return expected

    def stream(self, length: int, payload_bytes: int) -> PieceStream:
        raise NotImplementedError(f"codec {self.codec} validates a payload only once it is complete")

    def pieces(self, payload: np.ndarray, length: int) -> Iterator[Piece]:
        """The decoded values as the codec's pieces, in increasing coordinate order."""
        if not self.streams:
            yield DensePiece(0, self.decode(payload, length))
            return
        raw = np.ascontiguousarray(payload).view(np.uint8).reshape(-1)
        dec = self.stream(length, len(raw))
        for start in range(0, len(raw), 1 << 20):
            yield from dec.feed(raw[start : start + (1 << 20)].data)
        yield from dec.finish()

    def decode(self, payload: np.ndarray, length: int) -> np.ndarray:
        """All `length` values as one float32 array (a view of `payload` where the codec allows)."""
        out = np.zeros(length, dtype=np.float32)
        for piece in self.pieces(payload, length):
            piece.write_to(out)
        return out

    def blocks(self, payload: np.ndarray, length: int, block: int = BLOCK) -> Blocks:
        """The values in order as (start, float32 block) pairs of at most `block` values each."""
        return dense_blocks(self.pieces(payload, length), length, block)


def dense_blocks(pieces: Iterable[Piece], length: int, block: int = BLOCK) -> Blocks:
    """Coordinate-ordered pieces as consecutive dense (start, values) blocks (zeros where no piece
    lands). The yielded array is reused: use it before asking for the next block."""
    buf = np.zeros(min(block, max(length, 1)), dtype=np.float32)
    start = 0

    def flush_to(pos: int) -> Iterator[tuple[int, np.ndarray]]:
        nonlocal start
        while start + len(buf) <= pos and start < length:
            n = min(len(buf), length - start)
            yield start, buf[:n]
            buf.fill(0)
            start += n

    for p in pieces:
        if isinstance(p, SparsePiece):
            idx, vals, i = p.indices, p.values, 0
            while i < len(idx):
                yield from flush_to(int(idx[i]))
                j = i + int(np.searchsorted(idx[i:], start + len(buf)))
                buf[idx[i:j] - start] = vals[i:j]
                i = j
        else:
            pos, vals = p.offset, p.values
            while len(vals):
                yield from flush_to(pos)
                n = min(len(vals), start + len(buf) - pos)
                buf[pos - start : pos - start + n] = vals[:n]
                pos, vals = pos + n, vals[n:]
    yield from flush_to(length + len(buf))


def reconstructed_blocks(
    decoder: Decoder, payload: np.ndarray, global_vector: np.ndarray, block: int = BLOCK
) -> Blocks:
    """The update's own values x (g + v for a delta codec) in dense blocks."""
    length = len(global_vector)
    for start, values in decoder.blocks(payload, length, block):
        if decoder.delta:
            values = np.add(values, global_vector[start : start + len(values)])
        yield start, values


def values(decoder: Decoder, payload: np.ndarray, global_vector: np.ndarray) -> np.ndarray:
    """The update's own values x as one float32 vector (g + v for a delta codec)."""
    v = decoder.decode(payload, len(global_vector))
    return np.add(v, global_vector) if decoder.delta else v


def check_reconstructed(piece: Piece, global_vector: np.ndarray | None, what: str) -> None:
    """VectorError unless the piece's values (plus g where it is a delta) are all finite float32."""
    vals = piece.values
    if global_vector is not None:
        base = (
            global_vector[piece.indices]
            if isinstance(piece, SparsePiece)
            else global_vector[piece.offset : piece.offset + len(vals)]
        )
        with np.errstate(over="ignore", invalid="ignore"):
            vals = np.add(vals, base)
    if vals.size and not np.isfinite(vals).all():  # exact; faster than a float64 sum
        raise VectorError(
            f"{what} decodes to non-finite values (NaN or Inf"
            f"{' once added to the global vector' if global_vector is not None else ''}); "
            f"nothing was stored"
        )


_REGISTRY: dict[str, Decoder] = {}


def family(spec: str) -> str:
    """The registry key of a codec spec: the spec up to its first ':'."""
    return spec.partition(":")[0]


def register_decoder(decoder: Decoder) -> Decoder:
    """Make `decoder` the one for its codec family (a later registration replaces an earlier one)."""
    if not decoder.codec:
        raise ValueError(f"{type(decoder).__name__} names no codec")
    _REGISTRY[decoder.codec] = decoder
    return decoder


def decoder_for(codec: str) -> Decoder:
    """The registered decoder of `codec` (bound to its parameters); VectorError (INVALID_ARGUMENT) names the known ones."""
    try:
        decoder = _REGISTRY[family(codec or "raw")]
    except KeyError:
        raise VectorError(f"update codec must be one of {codecs()}, got {codec!r}") from None
    return decoder.bind(codec or "raw")


def codecs() -> list[str]:
    """The codec families an update may use, sorted."""
    return sorted(_REGISTRY)
