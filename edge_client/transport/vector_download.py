"""Downloading a round's global vector: the request, then the stream assembled and checked into one array.

The stream is a header, then chunks. The header names either the vector itself (assembled by
`VectorAssembler` into a recycled buffer, its digest checked against what the Task announced) or an
`xor+zstd` delta against the cached vector the request named (`DeltaDownload` rebuilds and checks it).
Anything else (no header, a second header, an empty stream) is a ProtocolError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from fedort.common import digests
from fedort.common.errors import ProtocolError
from fedort.edge_client.transport.download_delta import DeltaDownload
from fedort.protos.messages import meta_from_pb
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.update_codecs.xor_delta import DOWNLOAD_DELTA
from fedort.protos.update_part import part_kind
from fedort.protos.vector_stream import VectorAssembler, VectorMeta


def vector_request(
    client_id: str, model_id: str, round: int, base: tuple[bytes, np.ndarray] | None, blake3: bool
) -> pb.VectorRequest:
    """The DownloadVector request: `base` names the cached vector a delta may be sent against; `blake3` asks
    for the vector checked with BLAKE3 (protocol 1.6)."""
    return pb.VectorRequest(
        client_id=client_id,
        model_id=model_id,
        round=round,
        cached_sha256=base[0] if base is not None else b"",
        digests=[digests.BLAKE3] if blake3 else [],
    )


def wants_blake3(expected_blake3: bytes | None) -> bool:
    """Ask for BLAKE3 when the Task announced that digest and the `blake3` package is here."""
    return bool(expected_blake3) and digests.BLAKE3 in digests.available()


def assemble_vector(
    parts: Iterable,
    round: int,
    *,
    expected_length: int | None,
    expected_sha256: bytes | None,
    expected_blake3: bytes | None,
    base: tuple[bytes, np.ndarray] | None,
    out: Callable[[int], np.ndarray],
) -> tuple[np.ndarray, int]:
    """(vector, bytes received) from a DownloadVector stream (see the module docstring). `out(n)` gives
    the array a plain vector of n values is assembled into; `expected_blake3` is None unless it was asked for."""
    asm: VectorAssembler | None = None
    delta: DeltaDownload | None = None
    for part in parts:
        kind = part_kind(part)
        if kind == "chunk":
            chunk = part if type(part) is memoryview else part.chunk
        if delta is not None and kind == "chunk":
            delta.add(chunk)
        elif asm is None and delta is None:
            if kind != "header":
                raise ProtocolError(f"vector stream of round {round} must start with a header, got {kind}")
            meta = meta_from_pb(part.header)
            if meta.codec == DOWNLOAD_DELTA:
                delta = DeltaDownload(meta, base, expected_length, expected_sha256)
                continue
            check_named_digest(meta, round, expected_sha256, expected_blake3)
            asm = VectorAssembler(meta, expected_length=expected_length, out=out)
        elif kind == "chunk" and asm is not None:
            asm.add(chunk)
        else:
            raise ProtocolError(f"vector stream of round {round} carries a second header")
    if delta is not None:
        return delta.finish(), delta.received
    if asm is None:
        raise ProtocolError(f"vector stream of round {round} was empty")
    return asm.finish(), asm.received_bytes


def check_named_digest(
    meta: VectorMeta, round: int, expected_sha256: bytes | None, expected_blake3: bytes | None
) -> None:
    """The header's digest must be the one the Task announced for this vector: its BLAKE3 if the device asked
    for one (`expected_blake3`), else its sha256; ProtocolError otherwise (a header digest nobody asked for too)."""
    if meta.digest == digests.BLAKE3:
        name, expected = "BLAKE3", expected_blake3
        if not expected:
            raise ProtocolError(f"round {round} vector header names a BLAKE3 digest this device did not ask for")
    else:
        name, expected = "sha256", expected_sha256
    if expected and meta.sha256 != expected:
        raise ProtocolError(
            f"round {round} vector header {name} {meta.sha256.hex()[:16]}… differs from the "
            f"task's {expected.hex()[:16]}…"
        )


__all__ = ["assemble_vector", "check_named_digest", "vector_request", "wants_blake3"]
