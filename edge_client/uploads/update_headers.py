"""The header of an update stream, raw or codec-encoded (built once per upload, its digest computed here:
sha256, or BLAKE3 for a coordinator that announced it, protos.digests; `value=b""` leaves it empty for the
co-located path, which hashes the bytes while it writes them into the file, edge_client.local_vectors)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fedort.protos.messages import Metric, UpdateHeader
from fedort.protos.update_codecs import describe_payload
from fedort.protos.vector_stream import describe


def update_header(
    client_id: str,
    model_id: str,
    round: int,
    vector: np.ndarray,
    num_examples: int,
    metrics: Mapping[str, Metric],
    chunk_size: int,
    trained_from_sha256: bytes = b"",
    digest: str = "",
    value: bytes | None = None,
) -> UpdateHeader:
    """The header of an update stream for `vector` (computes its sha256 once), trained from the global
    vector with digest `trained_from_sha256` (the coordinator refuses an update that names none)."""
    meta = describe(vector, model_id, round, chunk_size=chunk_size, digest=digest, sha256=value)
    return UpdateHeader(client_id, meta, int(num_examples), dict(metrics), bytes(trained_from_sha256))


def encoded_update_header(
    client_id: str,
    model_id: str,
    round: int,
    payload: bytes,
    *,
    codec: str,
    length: int,
    base_sha256: bytes,
    num_examples: int,
    metrics: Mapping[str, Metric],
    chunk_size: int,
    digest: str = "",
    value: bytes | None = None,
) -> UpdateHeader:
    """The header of an update stream carrying a codec payload (sha256 over the payload)."""
    meta = describe_payload(
        payload,
        model_id=model_id,
        round=round,
        length=length,
        codec=codec,
        base_sha256=base_sha256,
        chunk_size=chunk_size,
        digest=digest,
        value=value,
    )
    return UpdateHeader(client_id, meta, int(num_examples), dict(metrics), bytes(base_sha256))
