"""Update payload digests: sha256 everywhere, BLAKE3 where the coordinator announces it (protocol 1.3).

`VectorHeader.sha256` carries the payload's digest and `VectorHeader.digest` names its algorithm
("" = "sha256", what every 1.0–1.2 peer sends and checks). BLAKE3-256 (the `blake3` package,
bindings of the reference Rust crate; 32 bytes like sha256) hashes faster than sha256 (even with
SHA-NI), which matters where every acknowledged update is hashed by the
device and again by the coordinator. A coordinator lists the digests it accepts besides sha256 in
`JoinReply.update_digests`; a device uses BLAKE3 only if announced there (an older coordinator
would read the digest as a sha256 and refuse the update), and a coordinator refuses a digest it
did not announce with INVALID_ARGUMENT before receiving anything. Global vectors, artifacts and
`trained_from_sha256` stay sha256: they name vectors across rounds, caches and state files. (A FIT
task may also carry its global vector's BLAKE3, `Task.vector_blake3`, protocol 1.5: only to check
the co-located file a device reads, never as a name.) A co-located device's first attempt may leave the
digest value empty for the coordinator to fill from the bytes it takes (`JoinReply.hashes_local_files`,
protocol 1.6): that update is hashed once, by the coordinator.

Stored digests (the `submissions.sha256` column): plain hex for sha256 (as before), "blake3:<hex>"
for BLAKE3, so recovery checks a spooled update with the algorithm it arrived with.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Protocol

from fedort.common.errors import VectorError

SHA256 = "sha256"
BLAKE3 = "blake3"
KNOWN = (SHA256, BLAKE3)


class Hasher(Protocol):
    def update(self, data: bytes | memoryview, /) -> object: ...
    def digest(self) -> bytes: ...
    def hexdigest(self) -> str: ...


def _blake3():
    try:
        from blake3 import blake3
    except ImportError:
        return None
    return blake3


def available() -> tuple[str, ...]:
    """The digests this process can compute (sha256 always; BLAKE3 when the `blake3` package is installed)."""
    return (SHA256, BLAKE3) if _blake3() is not None else (SHA256,)


def canonical(name: str) -> str:
    """The algorithm a header's `digest` field names ("" is sha256); VectorError for an unknown one."""
    name = name or SHA256
    if name not in KNOWN:
        raise VectorError(f"unknown vector digest {name!r}; known: {list(KNOWN)}")
    return name


def new(name: str = SHA256) -> Hasher:
    """A running hash of algorithm `name` ("" = sha256)."""
    name = canonical(name)
    if name == SHA256:
        return hashlib.sha256()
    blake3 = _blake3()
    if blake3 is None:
        raise VectorError("vector digest 'blake3' needs the blake3 package, which is not installed here")
    return blake3()


def digest(name: str, data: bytes | memoryview) -> bytes:
    """The digest of `data` with algorithm `name`."""
    h = new(name)
    h.update(data)
    return h.digest()


def check_accepted(name: str, accepted: Iterable[str]) -> str:
    """`name` if sha256 or one of `accepted` (what the coordinator announced); VectorError otherwise."""
    name = canonical(name)
    allowed = [SHA256, *(a for a in accepted if a != SHA256)]
    if name not in allowed:
        raise VectorError(
            f"vector digest {name!r} is not accepted by this coordinator; it accepts {allowed} "
            "(JoinReply.update_digests)"
        )
    return name


def choose(announced: Iterable[str]) -> str:
    """The fastest digest both ends have: BLAKE3 if the coordinator announced it and it is installed, else sha256."""
    return BLAKE3 if BLAKE3 in set(announced) and BLAKE3 in available() else SHA256


def stored(name: str, value: bytes) -> str:
    """How a submission row records a payload digest: hex for sha256 (as ever), "blake3:<hex>" otherwise."""
    name = canonical(name)
    return value.hex() if name == SHA256 else f"{name}:{value.hex()}"


def parse_stored(text: str) -> tuple[str, str]:
    """(algorithm, hex) of a stored digest (`stored`'s inverse)."""
    name, sep, hexdigest = text.partition(":")
    return (canonical(name), hexdigest) if sep else (SHA256, text)


__all__ = [
    "BLAKE3",
    "KNOWN",
    "SHA256",
    "available",
    "canonical",
    "check_accepted",
    "choose",
    "digest",
    "new",
    "parse_stored",
    "stored",
]
