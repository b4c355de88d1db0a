"""What every codec provides: `encode`, a streaming decoder, and the pieces the decoder yields.

A decoder consumes the payload in chunks of any size (`feed`), keeps at most one partial
record between chunks, and returns decoded pieces: `DensePiece(offset, values)` for a run of
consecutive coordinates, or `SparsePiece(indices, values)` for scattered ones (top-k). A consumer
folds a piece with `piece.add_to(acc, weight)` (acc[...] += weight * values in the accumulator's
dtype, float64 for FedAvg) or writes it with `piece.write_to(out)`. No decoder materialises a
dense copy of a sparse payload; memory per `feed` is O(chunk).

Every malformed payload raises VectorError naming what was expected and what arrived: more or
fewer bytes than the codec's layout implies (`finish` checks completeness), non-finite values
or scales, out-of-range or non-increasing indices, a truncated or corrupt zstd frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from fedort.common.errors import VectorError
from fedort.protos.update_codecs.spec import CodecSpec

F32 = np.dtype("<f4")
MAX_LENGTH = (1 << 32) - 1  # top-k indices are uint32


@dataclass(frozen=True)
class DensePiece:
    """Decoded values of coordinates offset .. offset + len(values) - 1."""

    offset: int
    values: np.ndarray  # float32

    def add_to(self, acc: np.ndarray, weight: float = 1.0) -> None:
        """acc[offset:offset+n] += weight * values, computed in acc's dtype."""
        view = acc[self.offset : self.offset + len(self.values)]
        view += np.multiply(self.values, weight, dtype=acc.dtype)

    def write_to(self, out: np.ndarray) -> None:
        out[self.offset : self.offset + len(self.values)] = self.values


@dataclass(frozen=True)
class SparsePiece:
    """Decoded values of the coordinates `indices` (strictly increasing, so unique)."""

    indices: np.ndarray  # intp
    values: np.ndarray  # float32

    def add_to(self, acc: np.ndarray, weight: float = 1.0) -> None:
        """acc[indices] += weight * values (indices are unique, so fancy-index += is exact)."""
        acc[self.indices] += np.multiply(self.values, weight, dtype=acc.dtype)

    def write_to(self, out: np.ndarray) -> None:
        out[self.indices] = self.values


Piece = Union[DensePiece, SparsePiece]


FINITE_STEP = 1 << 16  # values per isfinite pass, through one reused bool scratch array (64 KiB: stays in cache)


def first_non_finite(values: np.ndarray) -> int | None:
    """Index in `values.reshape(-1)` of the first NaN or Inf, or None. `isfinite(...).all()` block by block
    through one small scratch array: exact, faster than a float64 sum, and no
    vector-sized temporary (fresh memory, mapped and zeroed by the kernel, on every call)."""
    flat = values.reshape(-1)
    scratch = np.empty(min(FINITE_STEP, flat.size), dtype=bool)
    for start in range(0, flat.size, FINITE_STEP):
        part = flat[start : start + FINITE_STEP]
        finite = np.isfinite(part, out=scratch[: part.size])
        if not finite.all():
            return start + int(np.argmin(finite))
    return None


def check_finite(values: np.ndarray, what: str) -> None:
    """VectorError if any value is NaN or Inf (`first_non_finite`)."""
    bad = first_non_finite(values)
    if bad is not None:
        raise VectorError(
            f"{what} contains a non-finite value ({values.reshape(-1)[bad]}) at position {bad} of the piece"
        )


def check_vector(vector: np.ndarray, spec: CodecSpec) -> np.ndarray:
    """The vector to encode as contiguous 1-D float32, finite, at most MAX_LENGTH long."""
    if not isinstance(vector, np.ndarray) or vector.ndim != 1 or vector.dtype != F32:
        got = f"{vector.dtype} with shape {vector.shape}" if isinstance(vector, np.ndarray) else type(vector).__name__
        raise VectorError(f"codec {spec} encodes 1-D float32 vectors, got {got}")
    if vector.shape[0] > MAX_LENGTH:
        raise VectorError(f"codec {spec} encodes at most {MAX_LENGTH} values, got {vector.shape[0]}")
    check_finite(vector, f"the vector to encode with {spec}")
    return np.ascontiguousarray(vector)


class StreamDecoder:
    """Decode one payload fed in arbitrary chunks (see the module docstring).

    Subclasses set `record` (bytes per self-contained record) and implement `_decode(view)`
    for a whole number of records (plus, once the payload is complete, a shorter final record
    when the layout has one). `feed` and `finish` return lists of pieces.
    """

    record = 1

    def __init__(self, spec: CodecSpec, length: int, payload_bytes: int) -> None:
        self.spec = spec
        self.length = int(length)
        self.payload_bytes = int(payload_bytes)
        self.received = 0
        self.done = 0  # payload bytes decoded before the current `_decode` call
        self._tail = b""

    def feed(self, chunk: bytes | memoryview) -> list[Piece]:
        n = len(chunk)
        if self.received + n > self.payload_bytes:
            raise VectorError(
                f"{self.spec} payload for {self.length} values must be {self.payload_bytes} bytes; "
                f"received at least {self.received + n}"
            )
        self.received += n
        data = self._tail + bytes(chunk) if self._tail else chunk
        avail = len(data)
        usable = avail if self.received == self.payload_bytes else avail - avail % self.record
        self._tail = bytes(data[usable:]) if usable < avail else b""
        if not usable:
            return []
        pieces = self._decode(memoryview(data)[:usable])
        self.done += usable
        return pieces

    def finish(self) -> list[Piece]:
        """Check that the whole payload arrived; return any last pieces."""
        if self.received != self.payload_bytes:
            raise VectorError(
                f"{self.spec} payload for {self.length} values must be {self.payload_bytes} bytes; "
                f"the stream ended after {self.received}"
            )
        return []

    def _decode(self, view: memoryview) -> list[Piece]:
        raise NotImplementedError


class Codec:
    """One codec: `encode(vector, rng) -> bytes` and `decoder(length, payload_bytes) -> StreamDecoder`."""

    def __init__(self, spec: CodecSpec) -> None:
        self.spec = spec

    def payload_size(self, length: int) -> int | None:
        """Exact payload bytes for `length` values (None when it depends on the data, as for zstd)."""
        raise NotImplementedError

    def encode(self, vector: np.ndarray, rng: np.random.Generator | None = None) -> bytes:
        raise NotImplementedError

    def decoder(self, length: int, payload_bytes: int | None = None) -> StreamDecoder:
        """A streaming decoder for a payload of `payload_bytes` (default: the exact size the layout implies)."""
        expected = self.payload_size(length)
        if payload_bytes is None:
            if expected is None:
                raise VectorError(f"{self.spec} payloads vary in size: the header must give payload_bytes")
            payload_bytes = expected
        elif expected is not None and payload_bytes != expected:
            raise VectorError(
                f"{self.spec} payload for {length} values must be {expected} bytes, header says {payload_bytes}"
            )
        return self._decoder(int(length), int(payload_bytes))

    def _decoder(self, length: int, payload_bytes: int) -> StreamDecoder:
        raise NotImplementedError

    def decode(self, payload: bytes, length: int) -> np.ndarray:
        """One-shot convenience: the dense float32 vector a payload decodes to."""
        out = np.zeros(length, dtype=F32)
        dec = self.decoder(length, len(payload))
        for piece in dec.feed(payload) + dec.finish():
            piece.write_to(out)
        return out


__all__ = [
    "Codec",
    "DensePiece",
    "F32",
    "MAX_LENGTH",
    "Piece",
    "SparsePiece",
    "StreamDecoder",
    "check_finite",
    "check_vector",
    "first_non_finite",
]
