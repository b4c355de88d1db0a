"""The device side of a download delta (`xor+zstd`): collect the payload, rebuild the vector, check it.

The coordinator sends it only when the device named a cached vector (VectorRequest.cached_sha256);
the payload is bounded by its header, hashed as it arrives, and the rebuilt vector must hash to
what the task announced, so a wrong base or a corrupt payload can never be trained on.
"""

from __future__ import annotations

import hashlib

import numpy as np

from fedort.common.errors import ProtocolError, VectorError
from fedort.protos.update_codecs.xor_delta import decode_download
from fedort.protos.update_codecs.zstd import max_compressed_size
from fedort.protos.vector_stream import VectorMeta


class DeltaDownload:
    """One `xor+zstd` vector stream against `base` = (digest, vector) the request named."""

    def __init__(
        self,
        meta: VectorMeta,
        base: tuple[bytes, np.ndarray] | None,
        expected_length: int | None,
        expected_sha256: bytes | None,
    ) -> None:
        if base is None or meta.base_sha256 != base[0]:
            raise ProtocolError("coordinator sent a download delta against a vector this device did not name")
        if expected_length is not None and meta.length != expected_length:
            raise VectorError(f"vector must have {expected_length} elements, header says {meta.length}")
        if meta.length != len(base[1]) or not 0 < meta.payload_bytes <= max_compressed_size(4 * meta.length):
            raise VectorError(
                f"download delta header: {meta.length} values, {meta.payload_bytes} payload bytes, "
                f"against a cached vector of {len(base[1])}"
            )
        self.meta, self.base, self.expected = meta, base[1], expected_sha256
        self._parts: list[bytes | memoryview] = []
        self.received = 0
        self._hash = hashlib.sha256()

    def add(self, chunk: bytes | memoryview) -> None:
        self.received += len(chunk)
        if self.received > self.meta.payload_bytes:
            raise VectorError(f"download delta carries more than the {self.meta.payload_bytes} bytes it declares")
        self._hash.update(chunk)
        self._parts.append(chunk)

    def finish(self) -> np.ndarray:
        if self.received != self.meta.payload_bytes or self._hash.digest() != self.meta.sha256:
            raise VectorError(f"download delta: {self.received} of {self.meta.payload_bytes} bytes, or sha256 mismatch")
        vector = decode_download(b"".join(self._parts), self.base)
        got = hashlib.sha256(vector.data.cast("B")).digest()
        if self.expected and got != self.expected:
            raise VectorError(
                f"download delta rebuilt a vector hashing to {got.hex()[:16]}…, the task announced "
                f"{self.expected.hex()[:16]}…"
            )
        return vector
