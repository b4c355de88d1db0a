"""The secure-aggregation round's public parameters and one message dataclass per phase.

Phases (Bonawitz et al. 2017, rounds 0-3; SecAgg+ restricts every "all clients" to neighbours):

    0 advertise keys   client -> server  AdvertiseKeys   two X25519 public keys
                       server -> client  Roster          the neighbours' public keys (U1)
    1 share keys       client -> server  ShareKeys       one sealed share bundle per neighbour
                       server -> client  ShareDelivery   the bundles addressed to it (U2)
    2 masked input     client -> server  the masked vector (uint64, P + 1, over the upload stream)
    3 unmasking        server -> client  UnmaskRequest   who dropped, who survived (U3)
                       client -> server  UnmaskResponse  key shares of dropped, seed shares of survivors

Every message turns into JSON bytes (`to_bytes`/`from_bytes`, binary fields base64) so the
coordinator can persist it and the wire layer can carry it in a `bytes` field.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from types import MappingProxyType
from typing import Any

from fedort.common.errors import ConfigError
from fedort.common.secagg.graph import effective_degree, neighbour_graph
from fedort.common.secagg.labels import label
from fedort.common.secagg.quantize import FixedPoint
from fedort.common.secagg.scheme import LEGACY, require_known


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


class _Json:
    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes):
        return cls.from_dict(json.loads(data))  # type: ignore[attr-defined]


@lru_cache(maxsize=8)
def _graph(cohort: tuple[str, ...], degree: int, seed: bytes) -> Mapping[str, tuple[str, ...]]:
    """The round's graph, computed once per process: a simulation worker hosts many of the cohort's
    devices, each parsing its own copy of the parameters."""
    return MappingProxyType(neighbour_graph(cohort, degree, seed))


def default_threshold(degree: int) -> int:
    """Shares needed to recover a secret: a strict majority of each client's neighbours."""
    return degree // 2 + 1


@dataclass(frozen=True)
class SecAggParams(_Json):
    """What the coordinator announces for one round; both sides derive the graph from it."""

    round_id: int
    cohort: tuple[str, ...]
    threshold: int
    degree: int
    graph_seed: bytes
    fixed_point: FixedPoint
    length: int
    scheme: str = LEGACY  # mask PRG + Shamir field (`scheme.py`); absent on the wire: the legacy one

    def __post_init__(self) -> None:
        object.__setattr__(self, "cohort", tuple(sorted(self.cohort)))
        require_known(self.scheme)
        deg = effective_degree(len(self.cohort), self.degree)
        if len(self.cohort) < 2:
            raise ConfigError(f"secure aggregation needs a cohort of >= 2 clients, got {len(self.cohort)}")
        if not (deg // 2 < self.threshold <= deg):
            raise ConfigError(
                f"secagg threshold must be in ({deg // 2}, {deg}] for {deg} neighbours "
                f"(a majority of each client's neighbours), got {self.threshold}"
            )
        if self.length < 1:
            raise ConfigError(f"secagg vector length must be >= 1, got {self.length}")

    @cached_property
    def neighbours(self) -> Mapping[str, tuple[str, ...]]:
        return _graph(self.cohort, self.degree, self.graph_seed)

    def info(self, purpose: str, a: str, b: str) -> bytes:
        """HKDF info binding a derived key to this round, a purpose and an ordered pair of ids."""
        lo, hi = sorted((a, b))
        return label("fedort-secagg", self.round_id, purpose, lo, hi)

    def to_dict(self) -> dict[str, Any]:
        return {
            "round_id": self.round_id,
            "cohort": list(self.cohort),
            "threshold": self.threshold,
            "degree": self.degree,
            "graph_seed": b64(self.graph_seed),
            "fixed_point": self.fixed_point.to_dict(),
            "length": self.length,
            "scheme": self.scheme,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SecAggParams:
        return cls(
            int(d["round_id"]),
            tuple(d["cohort"]),
            int(d["threshold"]),
            int(d["degree"]),
            unb64(d["graph_seed"]),
            FixedPoint.from_dict(d["fixed_point"]),
            int(d["length"]),
            str(d.get("scheme", LEGACY)),
        )


@dataclass(frozen=True)
class AdvertiseKeys(_Json):
    client_id: str
    cipher_public: bytes  # c_pk: derives the share-encryption keys
    mask_public: bytes  # s_pk: derives the pairwise mask seeds
    scheme: str = ""  # the scheme the device computes (protocol 1.3); "" from older devices: the legacy one

    def to_dict(self) -> dict[str, Any]:
        return dict(self._encoded)

    @cached_property
    def _encoded(self) -> dict[str, Any]:
        """The JSON form, built once: the coordinator writes every key into each roster and each saved state."""
        d = {"client_id": self.client_id, "c": b64(self.cipher_public), "s": b64(self.mask_public)}
        return {**d, "v": self.scheme} if self.scheme else d

    @cached_property
    def compact_json(self) -> str:
        """`to_bytes` as text, built once: every roster that names this client carries it."""
        return json.dumps(self._encoded, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AdvertiseKeys:
        return cls(d["client_id"], unb64(d["c"]), unb64(d["s"]), str(d.get("v", "")))


@dataclass(frozen=True)
class Roster(_Json):
    """The public keys of the recipient's neighbours that advertised (its part of U1)."""

    keys: Mapping[str, AdvertiseKeys] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"keys": [k.to_dict() for k in self.keys.values()]}

    def to_bytes(self) -> bytes:
        """What `_Json.to_bytes` writes, from each key's text made once (`AdvertiseKeys.compact_json`)."""
        return ('{"keys":[' + ",".join(k.compact_json for k in self.keys.values()) + "]}").encode()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Roster:
        keys = [AdvertiseKeys.from_dict(k) for k in d["keys"]]
        return cls({k.client_id: k for k in keys})


Commitments = Mapping[str, tuple[bytes, bytes]]  # holder (or dealer) -> (C of the key share, C of the seed share)


def encode_commitments(m: Commitments) -> dict[str, list[str]]:
    """The JSON form of commitments: each pair as two base64 strings."""
    return {k: [b64(ck), b64(cb)] for k, (ck, cb) in m.items()}


def decode_commitments(d: dict[str, list[str]]) -> dict[str, tuple[bytes, bytes]]:
    return {k: (unb64(ck), unb64(cb)) for k, (ck, cb) in d.items()}


@dataclass(frozen=True)
class ShareKeys(_Json):
    """sender -> one sealed bundle per neighbour (its Shamir shares of the s_sk seed and of b, and their
    salts); under the committed scheme also the commitment to each share and the digest of b (`commit.py`)."""

    client_id: str
    sealed: Mapping[str, bytes]
    commitments: Commitments = field(default_factory=dict)  # holder -> (C key share, C seed share)
    seed_digest: bytes = b""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"client_id": self.client_id, "sealed": {k: b64(v) for k, v in self.sealed.items()}}
        if self.commitments or self.seed_digest:
            d["commit"], d["digest"] = encode_commitments(self.commitments), b64(self.seed_digest)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShareKeys:
        sealed = {k: unb64(v) for k, v in d["sealed"].items()}
        return cls(d["client_id"], sealed, decode_commitments(d.get("commit", {})), unb64(d.get("digest", "")))


@dataclass(frozen=True)
class ShareDelivery(_Json):
    """The sealed bundles addressed to one client, by sender (its neighbours in U2), and under the committed
    scheme each sender's commitments to the shares in that bundle (the recipient checks them on opening)."""

    sealed: Mapping[str, bytes]
    commitments: Commitments = field(default_factory=dict)  # sender -> (C key share, C seed share)
    indices: Mapping[str, int] = field(default_factory=dict)  # sender -> the recipient's share index (public graph)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"sealed": {k: b64(v) for k, v in self.sealed.items()}}
        if not self.commitments:
            return d
        return {**d, "commit": encode_commitments(self.commitments), "index": dict(self.indices)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShareDelivery:
        sealed = {k: unb64(v) for k, v in d["sealed"].items()}
        return cls(sealed, decode_commitments(d.get("commit", {})), {k: int(i) for k, i in d.get("index", {}).items()})


@dataclass(frozen=True)
class UnmaskRequest(_Json):
    """U2 minus U3 (`dropped`: sent shares, no masked input) and U3 (`survivors`)."""

    dropped: tuple[str, ...]
    survivors: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"dropped": list(self.dropped), "survivors": list(self.survivors)}

    def to_bytes(self) -> bytes:
        return self._bytes

    @cached_property
    def _bytes(self) -> bytes:
        """Encoded once: the coordinator sends the same request to every survivor."""
        return super().to_bytes()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> UnmaskRequest:
        return cls(tuple(d["dropped"]), tuple(d["survivors"]))


@dataclass(frozen=True)
class UnmaskResponse(_Json):
    """Shares as (index, 17 bytes): of dropped neighbours' mask-key seed, of survivors' self-mask seed b.
    Committed scheme: `salts` opens each revealed share's commitment (by owner: one share per owner is
    revealed), `complaints` names the neighbours whose bundle did not open or whose share broke its commitment."""

    client_id: str
    key_shares: Mapping[str, tuple[int, bytes]]
    seed_shares: Mapping[str, tuple[int, bytes]]
    salts: Mapping[str, bytes] = field(default_factory=dict)
    complaints: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dict(self._encoded)

    @cached_property
    def _encoded(self) -> dict[str, Any]:
        """The JSON form, built once: the coordinator writes every response so far into each saved state."""
        enc = lambda m: {k: [i, b64(s)] for k, (i, s) in m.items()}  # noqa: E731
        d: dict[str, Any] = {"client_id": self.client_id, "key": enc(self.key_shares), "seed": enc(self.seed_shares)}
        if self.salts:
            d["salt"] = {k: b64(v) for k, v in self.salts.items()}
        return {**d, "complain": list(self.complaints)} if self.complaints else d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> UnmaskResponse:
        dec = lambda m: {k: (int(i), unb64(s)) for k, (i, s) in m.items()}  # noqa: E731
        salts = {k: unb64(v) for k, v in d.get("salt", {}).items()}
        return cls(d["client_id"], dec(d["key"]), dec(d["seed"]), salts, tuple(str(c) for c in d.get("complain", ())))
