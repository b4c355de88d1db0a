"""The coordinator's side of secure aggregation: route keys and sealed shares, sum masked inputs
mod 2^b as they arrive, and at the end remove the masks and decode the SUM only.

    receive_keys(AdvertiseKeys)*  -> close_advertise()    -> roster_for(id)        U1
    receive_shares(ShareKeys)*    -> close_share_keys()   -> delivery_for(id)      U2
    receive_masked_input(id, y)*  -> close_masked_input() -> unmask_request()      U3
    receive_unmask(UnmaskResponse)*                       -> finish() -> SecAggResult

Memory is O(P): one uint64 accumulator; a masked vector is added and dropped. The server holds
sealed shares it cannot open and masked vectors that are uniform mod 2^b on their own; it never
holds a clear individual update. A client whose secrets can no longer be recovered (fewer than T
of its neighbours left) is excluded while that is still safe (phases 0-1), and the round aborts
with SecAggAborted naming the reason when it is not (phases 2-3) or when fewer than T survive.
`dump()`/`load()` (or `snapshot()`/`restore()`) give the durable state: JSON (`SecAggServerState`,
server_state.py) plus the accumulator; persist after every accepted message and every close_*.
Under the committed scheme the dealers' commitments are kept with the sealed bundles, each holder's
are relayed with its delivery, and `finish` checks every revealed share and rebuilt seed against
them (`share_checks`): who was caught is in `state.cheaters` and the result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fedort.common.secagg.commit import DIGEST_BYTES, seed_digest
from fedort.common.secagg.errors import SecAggAborted, SecAggError
from fedort.common.secagg.keys import Agreement, KeyPair, check_public
from fedort.common.secagg.masks import pairwise_seed, pairwise_sign, self_key
from fedort.common.secagg.messages import (
    AdvertiseKeys,
    Roster,
    SecAggParams,
    ShareDelivery,
    ShareKeys,
    UnmaskRequest,
    UnmaskResponse,
)
from fedort.common.secagg.pack import U64_CODEC, add_packed, packed_bits, unpack
from fedort.common.secagg.phases import Phase
from fedort.common.secagg.prg import MaskAdder, accumulator_dtype
from fedort.common.secagg.scheme import check_echo, combine_secrets, committed, share_bytes
from fedort.coordinator.privacy.secagg.server_state import SecAggServerState
from fedort.coordinator.privacy.secagg.share_checks import holder_indices, trusted_shares

MAX_BUNDLE_BYTES = 1024  # an honest bundle is about 200 bytes: a larger one only inflates its recipient's delivery


@dataclass(frozen=True)
class SecAggResult:
    """The decoded aggregate: sum of weight*update, sum of weights, whose inputs it holds."""

    weighted_sum: np.ndarray
    weight_sum: float
    survivors: tuple[str, ...]
    dropped: tuple[str, ...]
    cheaters: dict[str, str] = field(default_factory=dict)  # caught and left out: client -> how


class SecAggServer:
    """The protocol state of one secure-aggregation round on the coordinator."""

    def __init__(self, params: SecAggParams) -> None:
        self.state = SecAggServerState(params)
        self.accumulator = np.zeros(params.length + 1, dtype=np.uint64)
        self._indices: dict[str, dict[str, int]] = {}  # owner -> holder_indices, once the keys are fixed
        self._request: tuple[tuple[int, ...], UnmaskRequest] | None = None  # `unmask_request`, while U2, U3 stay
        self._owners: dict[bytes, str] = {}  # `_key_owners`

    @property
    def params(self) -> SecAggParams:
        return self.state.params

    @property
    def phase(self) -> Phase:
        return self.state.phase

    # ---- persistence -------------------------------------------------------------------
    def snapshot(self) -> tuple[bytes, np.ndarray]:
        """(state JSON, accumulator copy): write both atomically, the accumulator first."""
        return self.state.to_bytes(), self.accumulator.copy()

    def dump(self, sealed: bool = True) -> bytes:
        """State and accumulator in one blob (8-byte length, JSON, raw uint64 LE), for one atomic
        file write: the fold and the survivor list it belongs to can then never disagree."""
        state = self.state.to_bytes(sealed)
        return len(state).to_bytes(8, "little") + state + self.accumulator.astype("<u8").tobytes()

    @classmethod
    def load(cls, blob: bytes, sealed: bytes | None = None) -> SecAggServer:
        n = int.from_bytes(blob[:8], "little")
        return cls.restore(blob[8 : 8 + n], np.frombuffer(blob[8 + n :], dtype="<u8"), sealed)

    @classmethod
    def restore(cls, state: bytes, accumulator: np.ndarray, sealed: bytes | None = None) -> SecAggServer:
        server = cls.__new__(cls)
        server.state = SecAggServerState.from_bytes(state, sealed)
        acc = np.asarray(accumulator, dtype=np.uint64)
        if acc.shape != (server.params.length + 1,):
            raise SecAggError(f"accumulator has shape {acc.shape}, expected ({server.params.length + 1},)")
        server.accumulator = acc.copy()
        server._indices, server._request, server._owners = {}, None, {}
        return server

    # ---- helpers ----------------------------------------------------------------------
    def _expect(self, phase: Phase) -> None:
        if self.state.phase is not phase:
            raise SecAggError(
                f"secagg round {self.params.round_id}: expected phase {phase.value}, in {self.state.phase.value}"
            )

    def _abort(self, reason: str) -> SecAggAborted:
        self.state.phase = Phase.FAILED
        self.state.reason = reason
        return SecAggAborted(f"secagg round {self.params.round_id} aborted: {reason}")

    def _known(self, client_id: str, pool: list[str] | tuple[str, ...], what: str) -> None:
        if client_id not in pool:
            raise SecAggError(f"{what} from {client_id!r}, which is not in this phase's set of clients")

    def _prune(self, alive: set[str]) -> list[str]:
        """Drop, until none is left, clients with fewer than T neighbours in `alive`."""
        t, graph = self.params.threshold, self.params.neighbours
        while True:
            weak = {c for c in alive if len(set(graph[c]) & alive) < t}
            if not weak:
                return sorted(alive)
            alive -= weak

    def _require(self, alive: list[str], phase: str) -> None:
        if len(alive) < self.params.threshold:
            raise self._abort(f"{len(alive)} clients left after {phase}, the threshold is {self.params.threshold}")

    # ---- phase 0: advertise keys --------------------------------------------------------
    def receive_keys(self, msg: AdvertiseKeys) -> None:
        self._expect(Phase.ADVERTISE)
        self._known(msg.client_id, self.params.cohort, "keys")
        check_echo(self.params.scheme, msg.scheme, msg.client_id)
        if msg.client_id in self.state.keys and self.state.keys[msg.client_id] != msg:
            raise SecAggError(f"client {msg.client_id} advertised different keys twice")
        check_public(msg.cipher_public, f"client {msg.client_id}'s share-encryption key")
        check_public(msg.mask_public, f"client {msg.client_id}'s mask key")
        owners = self._key_owners()
        taken = {owners.get(msg.cipher_public, msg.client_id), owners.get(msg.mask_public, msg.client_id)}
        if msg.cipher_public == msg.mask_public or taken != {msg.client_id}:
            raise SecAggError(
                f"client {msg.client_id} advertised a public key that is already in use (its other key, or another "
                f"client's); every client needs two keys of its own"
            )
        self.state.keys[msg.client_id] = msg
        owners[msg.cipher_public] = owners[msg.mask_public] = msg.client_id

    def _key_owners(self) -> dict[bytes, str]:
        """Public key -> the client that advertised it (two distinct keys each), kept as keys arrive."""
        if len(self._owners) != 2 * len(self.state.keys):  # restored, or pruned by the phase close
            self._owners = {k: c for c, m in self.state.keys.items() for k in (m.cipher_public, m.mask_public)}
        return self._owners

    def close_advertise(self) -> list[str]:
        self._expect(Phase.ADVERTISE)
        u1 = self._prune(set(self.state.keys))
        self.state.keys = {c: self.state.keys[c] for c in u1}
        self.state.u1 = u1
        self._require(u1, "advertising keys")
        self.state.phase = Phase.SHARE_KEYS
        return u1

    def roster_for(self, client_id: str) -> Roster:
        self._known(client_id, self.state.u1, "roster request")
        return Roster({v: self.state.keys[v] for v in self.params.neighbours[client_id] if v in self.state.keys})

    # ---- phase 1: share keys ------------------------------------------------------------
    def receive_shares(self, msg: ShareKeys) -> None:
        self._expect(Phase.SHARE_KEYS)
        self._known(msg.client_id, self.state.u1, "shares")
        expected = set(self.roster_for(msg.client_id).keys)
        if any(len(b) > MAX_BUNDLE_BYTES for b in msg.sealed.values()):
            raise SecAggError(
                f"client {msg.client_id} sealed a share bundle of {max(len(b) for b in msg.sealed.values())} bytes; "
                f"a bundle (two shares, their salts, nonce and tag) is at most {MAX_BUNDLE_BYTES} bytes"
            )
        if set(msg.sealed) != expected:
            raise SecAggError(
                f"client {msg.client_id} sealed shares for {sorted(msg.sealed)}, expected its roster {sorted(expected)}"
            )
        if committed(self.params.scheme):
            lengths = {len(c) for pair in msg.commitments.values() for c in pair} | {len(msg.seed_digest)}
            if set(msg.commitments) != expected or lengths != {DIGEST_BYTES}:
                raise SecAggError(
                    f"client {msg.client_id} must commit to its shares for {sorted(expected)} and to its seed "
                    f"({DIGEST_BYTES}-byte SHA-256 each) under scheme {self.params.scheme}; got commitments for "
                    f"{sorted(msg.commitments)}"
                )
            self.state.commitments[msg.client_id] = dict(msg.commitments)
            self.state.digests[msg.client_id] = msg.seed_digest
        self.state.sealed[msg.client_id] = dict(msg.sealed)

    def close_share_keys(self) -> list[str]:
        self._expect(Phase.SHARE_KEYS)
        u2 = self._prune(set(self.state.sealed))
        self.state.sealed = {c: self.state.sealed[c] for c in u2}
        self.state.commitments = {c: self.state.commitments[c] for c in u2 if c in self.state.commitments}
        self.state.digests = {c: self.state.digests[c] for c in u2 if c in self.state.digests}
        self.state.u2 = u2
        self._require(u2, "sharing keys")
        self.state.phase = Phase.MASKED_INPUT
        return u2

    def delivery_for(self, client_id: str) -> ShareDelivery:
        self._known(client_id, self.state.u2, "share delivery request")
        sealed = {s: self.state.sealed[s][client_id] for s in self._senders_to(client_id)}
        if not committed(self.params.scheme):
            return ShareDelivery(sealed)
        commitments = {s: self.state.commitments[s][client_id] for s in sealed}
        indices = {s: self._holder_indices(s).get(client_id, 0) for s in sealed}
        return ShareDelivery(sealed, commitments, indices)

    def delivery_bytes(self, client_id: str) -> bytes:
        """`delivery_for(client_id).to_bytes()`, from the base64 forms the state keeps of every bundle and
        commitment (each encoded once, not once per delivery)."""
        self._known(client_id, self.state.u2, "share delivery request")
        state, senders = self.state, self._senders_to(client_id)
        d: dict[str, object] = {"sealed": {s: state.encoded_bundles(s)[client_id] for s in senders}}
        if committed(self.params.scheme):
            d["commit"] = {s: state.encoded_commitments(s)[client_id] for s in senders}
            d["index"] = {s: self._holder_indices(s).get(client_id, 0) for s in senders}
        return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()

    def _senders_to(self, client_id: str) -> list[str]:
        """The clients that sealed a bundle for `client_id`: a sender seals for its roster only, its neighbours (the
        graph is symmetric), so only those are looked at."""
        sealed = self.state.sealed
        return [s for s in self.params.neighbours[client_id] if client_id in sealed.get(s, ())]

    def _holder_indices(self, owner: str) -> dict[str, int]:
        """`share_checks.holder_indices` of `owner`, computed once a round (the keys are fixed after advertising)."""
        found = self._indices.get(owner)
        if found is None:
            found = self._indices[owner] = holder_indices(self.params, self.state.keys, owner)
        return found

    # ---- phase 2: masked input ----------------------------------------------------------
    def receive_masked_input(self, client_id: str, masked: np.ndarray) -> bool:
        """Fold one masked vector into the accumulator (mod 2^b). False, and nothing folded, when
        this client's input is already in (a retry after a lost ack or a coordinator restart)."""

        def add() -> None:
            y = np.asarray(masked)
            if y.dtype != np.uint64 or y.shape != self.accumulator.shape:
                raise SecAggError(
                    f"masked input must be uint64 of shape {self.accumulator.shape}, got {y.dtype} {y.shape}"
                )
            if self.params.fixed_point.bits < 64 and int(y.max()) > int(self.params.fixed_point.modulus_mask):
                raise SecAggError(f"masked input holds values >= 2^{self.params.fixed_point.bits}")
            np.add(self.accumulator, y, out=self.accumulator)

        return self._fold_input(client_id, add)

    def receive_masked_payload(self, client_id: str, payload: np.ndarray, codec: str) -> bool:
        """`receive_masked_input` of an upload as it arrived (`codec`'s bytes): packed b-bit words are added
        straight from the payload (`pack.add_packed`: every b/8-byte string is a word below 2^b, so there is
        nothing to check), secagg-u64 words as a view, checked below 2^b."""
        if codec == U64_CODEC:
            return self.receive_masked_input(client_id, unpack(payload, codec, self.params.length))

        def add() -> None:
            bits = self.params.fixed_point.bits
            if packed_bits(codec) != bits:
                raise SecAggError(f"masked input packs {packed_bits(codec)}-bit words, this round sums {bits}-bit ones")
            add_packed(self.accumulator, payload, codec, self.params.length)

        return self._fold_input(client_id, add)

    def _fold_input(self, client_id: str, add: Callable[[], None]) -> bool:
        """`add()` one new masked input into the accumulator (it raises before changing it), then reduce mod 2^b."""
        self._expect(Phase.MASKED_INPUT)
        self._known(client_id, self.state.u2, "masked input")
        if client_id in self.state.u3:
            return False
        add()
        self.accumulator &= self.params.fixed_point.modulus_mask
        self.state.u3.append(client_id)
        return True

    def close_masked_input(self) -> UnmaskRequest:
        self._expect(Phase.MASKED_INPUT)
        u3 = set(self.state.u3)
        self._require(sorted(u3), "masked input")
        graph, t = self.params.neighbours, self.params.threshold
        needed = u3 | {v for v in set(self.state.u2) - u3 if set(graph[v]) & u3}
        short = sorted(c for c in needed if len(set(graph[c]) & u3) < t)
        if short:
            raise self._abort(f"clients {short} have fewer than {t} surviving neighbours to unmask them")
        self.state.phase = Phase.UNMASK
        return self.unmask_request()

    def unmask_request(self) -> UnmaskRequest:
        """U2 − U3 and U3; built once while they stay (each unmask response and reply asks for it)."""
        u2, u3 = self.state.u2, self.state.u3  # both only grow, and only until masked inputs close
        size = (id(u2), len(u2), id(u3), len(u3))
        if self._request is None or self._request[0] != size:
            self._request = size, UnmaskRequest(tuple(sorted(set(u2) - set(u3))), tuple(sorted(u3)))
        return self._request[1]

    # ---- phase 3: unmasking -------------------------------------------------------------
    def receive_unmask(self, msg: UnmaskResponse) -> None:
        self._expect(Phase.UNMASK)
        self._known(msg.client_id, self.state.u3, "unmask response")
        request = self.unmask_request()
        if not set(msg.key_shares) <= set(request.dropped) or not set(msg.seed_shares) <= set(request.survivors):
            raise SecAggError(f"client {msg.client_id} answered for clients it was not asked about")
        size = share_bytes(self.params.scheme)
        if any(
            not 1 <= i <= len(self.params.cohort) or len(y) != size
            for i, y in [*msg.key_shares.values(), *msg.seed_shares.values()]
        ):
            raise SecAggError(
                f"client {msg.client_id} sent a share that is not (index 1..{len(self.params.cohort)}, {size} bytes)"
            )
        senders = set(self._senders_to(msg.client_id))
        if not set(msg.complaints) <= senders or set(msg.complaints) & {*msg.key_shares, *msg.seed_shares}:
            raise SecAggError(
                f"client {msg.client_id} complains about {sorted(msg.complaints)}: it may name only neighbours that "
                f"sealed shares for it ({sorted(senders)}), and reveal no share of those it names"
            )
        self.state.responses[msg.client_id] = msg

    def finish(self) -> SecAggResult:
        """Reconstruct the secrets (>= T shares each), remove all masks, decode the sum."""
        self._expect(Phase.UNMASK)
        request, t = self.unmask_request(), self.params.threshold
        self._require(list(self.state.responses), "unmasking")
        survivors = set(request.survivors)
        dropped = [v for v in request.dropped if set(self.params.neighbours[v]) & survivors]
        try:  # index = sender, commitments or one polynomial per secret: a lying responder's shares are left out
            trusted = trusted_shares(self.state, request, dropped)
        except SecAggAborted as e:
            raise self._abort(str(e)) from None
        self.state.cheaters.update(trusted.cheaters)
        seed_shares, key_shares = trusted.seed, trusted.key
        for u, shares in seed_shares.items():
            if len(shares) < t:
                raise self._abort(f"{len(shares)} trusted shares of {u}'s self-mask seed arrived, {t} needed")
        for v, shares in key_shares.items():
            if len(shares) < t:
                raise self._abort(f"{len(shares)} trusted shares of dropped {v}'s mask key arrived, {t} needed")
        try:
            secrets = combine_secrets(self.params.scheme, [*seed_shares.values(), *key_shares.values()], t)
        except SecAggError as e:  # shares no check could tell apart (an older scheme): a clean abort, not a crash
            raise self._abort(f"the shares do not rebuild the secrets: {e}") from None
        bits, scheme = self.params.fixed_point.bits, self.params.scheme
        masks = np.zeros(len(self.accumulator), dtype=accumulator_dtype(scheme, bits))  # summed, then removed once
        adder = MaskAdder(len(self.accumulator), scheme=scheme)
        for u, seed in zip(seed_shares, secrets):
            if committed(scheme) and seed_digest(self.params.round_id, u, seed) != self.state.digests.get(u):
                self.state.cheaters[u] = "its committed shares do not rebuild the self-mask seed it committed to"
                raise self._abort(f"the self-mask seed rebuilt for {u} does not match its commitment: {u} cheated")
            adder.add(masks, self_key(self.params, seed), 1, bits)
        for v, seed in zip(key_shares, secrets[len(seed_shares) :]):
            key = KeyPair.from_seed(seed)
            if key.public != self.state.keys[v].mask_public:
                if committed(scheme):
                    self.state.cheaters[v] = "its committed shares do not rebuild the mask key it advertised"
                raise self._abort(f"the mask key reconstructed for {v} does not match its advertised public key")
            mine = Agreement(key)
            for u in sorted(set(self.params.neighbours[v]) & survivors):
                seed_uv = pairwise_seed(self.params, mine, self.state.keys[u].mask_public, u, v)
                adder.add(masks, seed_uv, pairwise_sign(u, v), bits)
        weighted, weight = self.params.fixed_point.decode_sum(np.subtract(self.accumulator, masks))
        self.state.phase = Phase.DONE
        return SecAggResult(weighted, weight, request.survivors, request.dropped, dict(self.state.cheaters))
