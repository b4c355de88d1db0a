"""The coordinator's protocol state of one secure-aggregation round, as JSON (all but the accumulator).

What changes only until key sharing closes (the sealed bundles, and under the committed scheme the
commitments and seed digests that came with them) can be written apart once (`shared_bytes`), since it
is most of the state; `from_bytes` takes it back from there. `complaints` (accuser -> accused, from
unmask responses) and `cheaters` (client -> what it was caught at) say who must sit out a retry.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fedort.common.secagg.errors import SecAggError
from fedort.common.secagg.messages import (
    AdvertiseKeys,
    SecAggParams,
    UnmaskResponse,
    b64,
    decode_commitments,
    encode_commitments,
    unb64,
)
from fedort.common.secagg.phases import Phase

_FORMAT = 2  # `shared_bytes` with commitments; a file without "format" holds the bundles alone


@dataclass
class SecAggServerState:
    """Everything but the accumulator; JSON-serializable. Persist after every accepted message."""

    params: SecAggParams
    phase: Phase = Phase.ADVERTISE
    keys: dict[str, AdvertiseKeys] = field(default_factory=dict)  # U1 once closed
    sealed: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sender -> recipient -> bundle
    u1: list[str] = field(default_factory=list)
    u2: list[str] = field(default_factory=list)
    u3: list[str] = field(default_factory=list)  # masked inputs folded into the accumulator, in order
    responses: dict[str, UnmaskResponse] = field(default_factory=dict)
    reason: str = ""
    commitments: dict[str, dict[str, tuple[bytes, bytes]]] = field(default_factory=dict)  # dealer -> holder -> C
    digests: dict[str, bytes] = field(default_factory=dict)  # dealer -> digest of its self-mask seed
    cheaters: dict[str, str] = field(default_factory=dict)  # client -> how it was caught (coordinator's proof)
    # sender -> (its bundles or commitments as received, their base64 form): a sender's entry is replaced, never
    # changed in place, so the state written after every accepted message encodes each entry once
    _encoded: dict[tuple[str, str], tuple[object, Any]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def _cached(self, kind: str, sender: str, entry: Any, encode: Callable[[Any], Any]) -> Any:
        hit = self._encoded.get((kind, sender))
        if hit is None or hit[0] is not entry:
            hit = self._encoded[(kind, sender)] = (entry, encode(entry))
        return hit[1]

    def complaints(self) -> dict[str, tuple[str, ...]]:
        """accuser -> the neighbours it names in its unmask response."""
        return {c: r.complaints for c, r in self.responses.items() if r.complaints}

    def to_bytes(self, sealed: bool = True) -> bytes:
        """The state as JSON; without the shared part (`shared_bytes`, saved apart once) if not `sealed`."""
        return json.dumps(
            {
                "params": self.params.to_dict(),
                "phase": self.phase.value,
                "keys": [k.to_dict() for k in self.keys.values()],
                **({"sealed": self._sealed_dict(), **self._commit_dict()} if sealed else {}),
                "u1": self.u1,
                "u2": self.u2,
                "u3": self.u3,
                "responses": [r.to_dict() for r in self.responses.values()],
                "reason": self.reason,
                **({"cheaters": self.cheaters} if self.cheaters else {}),
            },
            sort_keys=True,
        ).encode()

    def encoded_bundles(self, sender: str) -> dict[str, str]:
        """recipient -> the base64 form of the bundle `sender` sealed for it (made once, as the state is written)."""
        return self._cached("sealed", sender, self.sealed[sender], _encode_bundles)

    def encoded_commitments(self, dealer: str) -> dict[str, list[str]]:
        """holder -> the base64 forms of `dealer`'s two commitments to its shares (made once)."""
        return self._cached("commit", dealer, self.commitments[dealer], encode_commitments)

    def _sealed_dict(self) -> dict[str, dict[str, str]]:
        return {s: self._cached("sealed", s, m, _encode_bundles) for s, m in self.sealed.items()}

    def _commit_dict(self) -> dict[str, Any]:
        if not self.commitments and not self.digests:
            return {}
        enc = {d: self._cached("commit", d, m, encode_commitments) for d, m in self.commitments.items()}
        return {"commitments": enc, "digests": {d: b64(v) for d, v in self.digests.items()}}

    def sealed_bytes(self) -> bytes:
        """The sealed share bundles and their commitments (they do not change once key sharing has closed)."""
        return json.dumps(
            {"format": _FORMAT, "sealed": self._sealed_dict(), **self._commit_dict()}, sort_keys=True
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes, sealed: bytes | None = None) -> SecAggServerState:
        """From `to_bytes`; `sealed` (from `sealed_bytes`) supplies the part a state saved without it lacks."""
        d: dict[str, Any] = json.loads(data)
        keys = [AdvertiseKeys.from_dict(k) for k in d["keys"]]
        responses = [UnmaskResponse.from_dict(r) for r in d["responses"]]
        shared: dict[str, Any] | None = d if "sealed" in d else json.loads(sealed) if sealed is not None else None
        if shared is None and d["phase"] not in (Phase.DONE.value, Phase.FAILED.value):
            raise SecAggError("secagg state was saved without its sealed shares, and they were not found")
        shared = shared or {"sealed": {}}
        if shared is not d and not isinstance(shared.get("format"), int):
            shared = {"sealed": shared}  # written before the commitments: the bundles alone
        commitments = {dealer: decode_commitments(m) for dealer, m in shared.get("commitments", {}).items()}
        return cls(
            SecAggParams.from_dict(d["params"]),
            Phase(d["phase"]),
            {k.client_id: k for k in keys},
            {s: {r: unb64(c) for r, c in m.items()} for s, m in shared["sealed"].items()},
            list(d["u1"]),
            list(d["u2"]),
            list(d["u3"]),
            {r.client_id: r for r in responses},
            d["reason"],
            commitments,
            {dealer: unb64(v) for dealer, v in shared.get("digests", {}).items()},
            dict(d.get("cheaters", {})),
        )


def _encode_bundles(bundles: dict[str, bytes]) -> dict[str, str]:
    return {recipient: b64(sealed) for recipient, sealed in bundles.items()}


__all__ = ["SecAggServerState"]
