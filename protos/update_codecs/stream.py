"""Codec payloads on the wire: the sender's header + chunks, the receiver's checked, streaming decode.

`describe_payload` builds the `VectorMeta` of an encoded payload (sha256 over the payload, the
bytes that travel); `iter_payload_chunks` cuts it into chunks. `VectorDecoder` is the receiver:
it checks the header (known codec, dtype, length limits, payload size the codec implies),
decodes chunk by chunk into pieces, hashes the payload as it goes, and in `finish()` checks that
every byte arrived and the digest matches. Pieces are yielded BEFORE the digest is known, so a
caller that must "change nothing" on a bad update either folds only after `finish()` succeeded
(e.g. decode once to validate while spooling, then decode the spooled payload into the fold),
or folds into scratch state it can drop.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

import numpy as np

from fedort.common import digests
from fedort.common.errors import ProtocolError, ResourceExhaustedError, VectorError
from fedort.protos.update_codecs.base import Piece
from fedort.protos.update_codecs.registry import get_codec
from fedort.protos.vector_stream import CHUNK_BYTES, DTYPES, MAX_CHUNK_BYTES, VectorMeta


def describe_payload(
    payload: bytes,
    *,
    model_id: str,
    round: int,
    length: int,
    codec: str,
    base_sha256: bytes = b"",
    chunk_size: int = CHUNK_BYTES,
    digest: str = "",
    value: bytes | None = None,
) -> VectorMeta:
    """The header for sending an encoded payload (its digest, sha256 unless `digest` names another, covers
    the payload bytes; computed unless `value` is given, b"" to be filled in as for `protos.codec.describe`)."""
    spec = get_codec(codec).spec.canonical
    algorithm = "" if digest in ("", digests.SHA256) else digests.canonical(digest)
    if value is None:
        value = hashlib.sha256(payload).digest() if not algorithm else digests.digest(algorithm, payload)
    return VectorMeta(
        model_id,
        int(round),
        int(length),
        value,
        codec=spec,
        chunk_size=int(chunk_size),
        base_sha256=bytes(base_sha256),
        payload_bytes=len(payload),
        digest=algorithm,
    )


def iter_payload_chunks(payload: bytes | bytearray, chunk_size: int = CHUNK_BYTES) -> Iterator[bytes]:
    view = memoryview(payload)
    for start in range(0, len(view), chunk_size):
        yield bytes(view[start : start + chunk_size])


def meta_digest_name(meta: VectorMeta) -> str:
    """The name of a header's digest algorithm, for messages."""
    return meta.digest or digests.SHA256


class VectorDecoder:
    """Decode one vector stream of any codec, checking what its header promises.

        dec = VectorDecoder(meta, expected_length=P, max_length=LIMIT)
        for chunk in chunks:
            for piece in dec.feed(chunk):
                piece.add_to(acc, weight)      # or piece.write_to(out), or discard (validation pass)
        for piece in dec.finish():            # raises VectorError: truncated payload, digest mismatch
            piece.add_to(acc, weight)

    `meta.delta` (base_sha256 set) says the pieces are d = vector - base; the caller adds base.
    Pass `base_sha256=` (the round's global digest) to refuse a delta against any other vector.
    A FedAvg fold of raw updates x_i and delta updates d_i against the global g (weights w_i):

        mean = (sum_raw w_i x_i + sum_delta w_i d_i + g * sum_delta w_i) / sum_all w_i

    so the global is added once at the end, never once per client.
    Raises VectorError (INVALID_ARGUMENT) for anything malformed, ResourceExhaustedError for a
    length over `max_length` or a chunk over `max_chunk_bytes`, ProtocolError for an empty chunk.
    """

    def __init__(
        self,
        meta: VectorMeta,
        *,
        expected_length: int | None = None,
        max_length: int | None = None,
        max_chunk_bytes: int = MAX_CHUNK_BYTES,
        base_sha256: bytes | None = None,
    ) -> None:
        if meta.dtype not in DTYPES:
            raise VectorError(f"vector dtype must be one of {sorted(DTYPES)}, got {meta.dtype!r}")
        if expected_length is not None and meta.length != expected_length:
            raise VectorError(f"vector must have {expected_length} elements for this model, header says {meta.length}")
        if max_length is not None and meta.length > max_length:
            raise ResourceExhaustedError(f"vector of {meta.length} elements exceeds the limit of {max_length}")
        if len(meta.sha256) != 32:
            raise VectorError(f"header sha256 must be 32 bytes, got {len(meta.sha256)}")
        if meta.base_sha256 and len(meta.base_sha256) != 32:
            raise VectorError(f"header base_sha256 must be empty or 32 bytes, got {len(meta.base_sha256)}")
        if meta.base_sha256 and base_sha256 is not None and meta.base_sha256 != base_sha256:
            raise VectorError(
                f"update is a delta against vector {meta.base_sha256.hex()[:16]}…, but this round's "
                f"global vector is {base_sha256.hex()[:16]}…"
            )
        self.meta = meta
        self.codec = get_codec(meta.codec or "raw")
        self._decoder = self.codec.decoder(meta.length, meta.payload_bytes or self.codec.payload_size(meta.length))
        self._max_chunk = max_chunk_bytes
        self._hash = digests.new(meta.digest)

    @property
    def delta(self) -> bool:
        return self.meta.delta

    @property
    def received_bytes(self) -> int:
        return self._decoder.received

    def feed(self, chunk: bytes) -> list[Piece]:
        n = len(chunk)
        if n == 0:
            raise ProtocolError("empty chunk in vector stream")
        if n > self._max_chunk:
            raise ResourceExhaustedError(f"chunk of {n} bytes exceeds the limit of {self._max_chunk}")
        pieces = self._decoder.feed(chunk)
        self._hash.update(chunk)
        return pieces

    def finish(self) -> list[Piece]:
        pieces = self._decoder.finish()
        if self._hash.digest() != self.meta.sha256:
            raise VectorError(
                f"payload {meta_digest_name(self.meta)} mismatch: header says {self.meta.sha256.hex()[:16]}…, "
                f"received bytes hash to {self._hash.hexdigest()[:16]}…"
            )
        return pieces


def decode_stream(meta: VectorMeta, chunks: Iterable[bytes], **limits) -> np.ndarray:
    """Convenience: the dense float32 vector (or delta, if `meta.delta`) a checked stream decodes to."""
    dec = VectorDecoder(meta, **limits)
    out = np.zeros(meta.length, dtype=np.float32)
    for chunk in chunks:
        for piece in dec.feed(chunk):
            piece.write_to(out)
    for piece in dec.finish():
        piece.write_to(out)
    return out


def accumulate_stream(
    meta: VectorMeta, chunks: Iterable[bytes], acc: np.ndarray, weight: float = 1.0, **limits
) -> None:
    """acc += weight * decoded values, streaming (no dense copy; acc changes even if the stream then fails)."""
    dec = VectorDecoder(meta, **limits)
    for chunk in chunks:
        for piece in dec.feed(chunk):
            piece.add_to(acc, weight)
    for piece in dec.finish():
        piece.add_to(acc, weight)


__all__ = ["VectorDecoder", "accumulate_stream", "decode_stream", "describe_payload", "iter_payload_chunks"]
