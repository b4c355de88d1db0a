"""The vector stream codec both ends use: a header, then ~1 MiB chunks, checked by sha256.

The header's sha256 always covers the bytes that travel (the encoded payload: for `raw`, the
vector's own bytes). This module handles `raw` whole vectors; `protos.codecs` adds the other
codecs (`codecs.VectorDecoder` is the codec-aware counterpart of `VectorAssembler`).

`encode_vector` yields the header and chunks of a flat numpy vector without copying more than
one chunk at a time; `VectorAssembler` rebuilds a vector from a header and its chunks into one
preallocated array, checking size, dtype and sha256 as it goes. Neither side ever holds more than
the vector plus one chunk. Plain functions on plain types; the gRPC glue converts to messages.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from fedort.common import digests
from fedort.common.errors import ProtocolError, ResourceExhaustedError, VectorError

CHUNK_BYTES = 1 << 20
MAX_CHUNK_BYTES = (4 << 20) - (64 << 10)  # stay under gRPC's default 4 MB message limit
CODEC_RAW = "raw"
DTYPES = {"float32": np.dtype("<f4")}


@dataclass(frozen=True)
class VectorMeta:
    """What a vector stream carries: which model and round, how long, and its digest."""

    model_id: str
    round: int
    length: int
    sha256: bytes
    dtype: str = "float32"
    codec: str = CODEC_RAW
    chunk_size: int = CHUNK_BYTES
    base_sha256: bytes = b""  # non-empty: the payload encodes vector - base (the vector with this digest)
    payload_bytes: int = 0  # bytes of the encoded payload; 0 means length * itemsize (raw)
    digest: str = ""  # algorithm of `sha256` (fedort/common/digests.py): "" = sha256, "blake3" (updates, 1.3)

    @property
    def nbytes(self) -> int:
        return self.length * DTYPES[self.dtype].itemsize if self.dtype in DTYPES else 0

    @property
    def delta(self) -> bool:
        """Whether the payload is the difference from the vector named by `base_sha256`."""
        return bool(self.base_sha256)


def vector_digest(vector: np.ndarray, algorithm: str = "") -> bytes:
    """The digest (sha256 unless `algorithm` names another, fedort/common/digests.py) of the vector's little-endian
    bytes (what the header's sha256 field covers)."""
    if not algorithm:
        return hashlib.sha256(_as_bytes(vector)).digest()
    return digests.digest(algorithm, _as_bytes(vector))


def byte_view(data: np.ndarray | bytes) -> memoryview:
    """The bytes of an array (any dtype; copied once only if it is not C-contiguous) or of a bytes-like
    object, as a flat memoryview: what is hashed, written or sent without another copy."""
    return np.ascontiguousarray(data).data.cast("B") if isinstance(data, np.ndarray) else memoryview(data)


def _as_bytes(vector: np.ndarray) -> memoryview:
    if vector.dtype != DTYPES["float32"] or vector.ndim != 1:
        raise VectorError(f"vectors on the wire are 1-D float32, got {vector.dtype} with shape {vector.shape}")
    return byte_view(vector)


def describe(
    vector: np.ndarray,
    model_id: str,
    round: int,
    chunk_size: int = CHUNK_BYTES,
    sha256: bytes | None = None,
    digest: str = "",
) -> VectorMeta:
    """The header for sending `vector` (computes its digest unless given; `digest`: the algorithm, "" = sha256).
    `sha256=b""` leaves the value to whoever reads the bytes next (edge_client.local_vectors hashes them as it writes)."""
    _as_bytes(vector)
    algorithm = "" if digest in ("", digests.SHA256) else digests.canonical(digest)
    value = sha256 if sha256 is not None else vector_digest(vector, algorithm)
    return VectorMeta(model_id, int(round), int(vector.shape[0]), value, chunk_size=int(chunk_size), digest=algorithm)


def iter_chunk_views(vector: np.ndarray, chunk_size: int = CHUNK_BYTES) -> Iterator[memoryview]:
    """The vector's bytes in chunks of `chunk_size` (the last may be shorter), as views of its memory."""
    view = _as_bytes(vector)
    return (view[start : start + chunk_size] for start in range(0, len(view), chunk_size))


def iter_chunks(vector: np.ndarray, chunk_size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The vector's bytes in chunks of `chunk_size` (the last may be shorter), each a copy of its own."""
    return (bytes(v) for v in iter_chunk_views(vector, chunk_size))


def check_vector_header(
    meta: VectorMeta,
    *,
    codecs: Iterable[str] = (CODEC_RAW,),
    expected_length: int | None = None,
    max_length: int | None = None,
) -> None:
    """The header's dtype, codec (one of `codecs`), length and size limit, before anything is allocated."""
    if meta.dtype not in DTYPES:
        raise VectorError(f"vector dtype must be one of {sorted(DTYPES)}, got {meta.dtype!r}")
    if meta.codec not in codecs:
        allowed = sorted(codecs)
        raise VectorError(
            f"vector codec must be {allowed[0]!r}, got {meta.codec!r}"
            if len(allowed) == 1
            else f"vector codec must be one of {allowed}, got {meta.codec!r}"
        )
    if expected_length is not None and meta.length != expected_length:
        raise VectorError(f"vector must have {expected_length} elements for this model, header says {meta.length}")
    if max_length is not None and meta.length > max_length:
        raise ResourceExhaustedError(f"vector of {meta.length} elements exceeds the limit of {max_length}")


class VectorAssembler:
    """Rebuild a vector from its header and chunks, checking everything the header promises.

    Raises VectorError for a wrong dtype/codec/size/digest and ResourceExhaustedError when the
    header announces more than `max_length` elements, before allocating anything
    (`check_vector_header`). The payload is dtype × length bytes: every codec accepted today (`raw`)
    sends the values themselves. `out(length)`: where to put them (e.g. a `BufferPool`'s `take`, memory a
    previous vector used; default a new array); the header is checked before it is called.
    """

    def __init__(
        self,
        meta: VectorMeta,
        *,
        expected_length: int | None = None,
        max_length: int | None = None,
        max_chunk_bytes: int = MAX_CHUNK_BYTES,
        codecs: Iterable[str] = (CODEC_RAW,),
        out: Callable[[int], np.ndarray] | None = None,
    ) -> None:
        check_vector_header(meta, codecs=codecs, expected_length=expected_length, max_length=max_length)
        if meta.base_sha256:
            raise VectorError("this receiver takes whole vectors; the header announces a delta (base_sha256 set)")
        if meta.payload_bytes and meta.payload_bytes != meta.nbytes:
            raise VectorError(
                f"a raw vector of {meta.length} values is {meta.nbytes} bytes, "
                f"header says payload_bytes={meta.payload_bytes}"
            )
        if len(meta.sha256) != 32:
            raise VectorError(f"header sha256 must be 32 bytes, got {len(meta.sha256)}")
        self.meta = meta
        self._max_chunk = max_chunk_bytes
        self._array = np.empty(meta.length, dtype=DTYPES[meta.dtype]) if out is None else out(meta.length)
        if self._array.dtype != DTYPES[meta.dtype] or self._array.shape != (meta.length,):
            raise VectorError(f"receive buffer is {self._array.dtype} {self._array.shape}, not {meta.length} values")
        self._buffer = self._array.data.cast("B")
        self._filled = 0
        self._hash = digests.new(meta.digest)

    @property
    def received_bytes(self) -> int:
        return self._filled

    def add(self, chunk: bytes | memoryview) -> None:
        n = len(chunk)
        if n == 0:
            raise ProtocolError("empty chunk in vector stream")
        if n > self._max_chunk:
            raise ResourceExhaustedError(f"chunk of {n} bytes exceeds the limit of {self._max_chunk}")
        end = self._filled + n
        if end > len(self._buffer):
            raise VectorError(f"vector stream carries more than the {len(self._buffer)} bytes its header declares")
        self._buffer[self._filled : end] = chunk
        self._hash.update(chunk)
        self._filled = end

    def finish(self) -> np.ndarray:
        """The complete vector, once every byte arrived and the digest matches."""
        if self._filled != len(self._buffer):
            raise VectorError(
                f"vector stream ended after {self._filled} of {len(self._buffer)} bytes "
                f"({self._filled // 4} of {self.meta.length} elements)"
            )
        if self._hash.digest() != self.meta.sha256:
            raise VectorError(
                f"vector {self.meta.digest or digests.SHA256} mismatch: header says {self.meta.sha256.hex()[:16]}…, "
                f"received bytes hash to {self._hash.hexdigest()[:16]}…"
            )
        return self._array


def assemble(meta: VectorMeta, chunks: Iterable[bytes], **limits) -> np.ndarray:
    """Convenience: feed all `chunks` to a VectorAssembler and return the checked vector."""
    asm = VectorAssembler(meta, **limits)
    for c in chunks:
        asm.add(c)
    return asm.finish()
