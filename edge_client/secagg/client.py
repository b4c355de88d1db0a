"""The device's side of secure aggregation: one `SecAggClient` per round, driven phase by phase.

    advertise() -> AdvertiseKeys
    share_keys(Roster) -> ShareKeys
    precompute_masks()      (optional, while the delivery is awaited: `edge_client.secagg_ahead`)
    masked_input(ShareDelivery, vector, weight) -> uint64 vector of length P + 1
        (masked_words: the same words in the mask accumulator's dtype, as `pack` sends them)
    unmask(UnmaskRequest) -> UnmaskResponse

Each call checks what the coordinator sent (neighbours only, distinct keys, at least T of them,
authenticated shares addressed to this client in this round) and raises SecAggError otherwise.
The client never reveals both the key share and the seed share of one neighbour, even across
repeated unmask requests: that pair would let the server unmask that neighbour's update.
Under the committed scheme a bundle that does not open, or whose shares break the commitments the
coordinator relayed, is not fatal: the client holds no share of that sender and names it in its
unmask response (a complaint); the masks do not depend on the shares, so its input stays valid.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable

import numpy as np

from fedort.common.secagg.commit import KEY, SALT_BYTES, SEED, opens, seed_digest, share_commitment
from fedort.common.secagg.errors import PeerShareError, SecAggError
from fedort.common.secagg.keys import SEED_BYTES, Agreement, KeyPair, open_sealed, seal
from fedort.common.secagg.labels import label
from fedort.common.secagg.masks import pairwise_seed, pairwise_sign, self_key
from fedort.common.secagg.messages import (
    AdvertiseKeys,
    Roster,
    SecAggParams,
    ShareDelivery,
    ShareKeys,
    UnmaskRequest,
    UnmaskResponse,
    b64,
    unb64,
)
from fedort.common.secagg.phases import Phase
from fedort.common.secagg.prg import MaskAdder, accumulator_dtype
from fedort.common.secagg.scheme import committed, share_bytes, split_secret
from fedort.common.secagg.shamir_prime import PRIME

log = logging.getLogger(__name__)


def _aad(params: SecAggParams, sender: str, recipient: str) -> bytes:
    return label("fedort-secagg-share", params.round_id, sender, recipient)


class SecAggClient:
    """The protocol state of one client in one round (holds its secrets; never persisted here)."""

    def __init__(self, client_id: str, params: SecAggParams) -> None:
        if client_id not in params.cohort:
            raise SecAggError(f"client {client_id!r} is not in the round's cohort")
        self.client_id = client_id
        self.params = params
        self.neighbours = params.neighbours[client_id]
        self.phase = Phase.ADVERTISE
        self._cipher = KeyPair.generate()
        self._share_keys = Agreement(self._cipher)  # AEAD keys with each neighbour, both directions
        self._pair_keys: dict[str, bytes] = {}  # neighbour -> the AEAD key of our pair (`_pair_key`)
        self._mask_seed = os.urandom(SEED_BYTES)  # shared: recovers the mask key if we drop
        self._mask = KeyPair.from_seed(self._mask_seed)
        self._seed = os.urandom(SEED_BYTES)  # shared: recovers our self mask if we survive
        self._roster: dict[str, AdvertiseKeys] = {}
        self._held: dict[str, tuple[int, bytes, bytes, bytes, bytes]] = {}  # sender -> (index, key, seed, salts)
        self._complaints: list[str] = []  # senders whose bundle failed (committed scheme)
        self._revealed_keys: set[str] = set()
        self._revealed_seeds: set[str] = set()
        self._ahead: tuple[tuple[np.ndarray, MaskAdder], dict[str, bytes]] | None = None  # precompute_masks

    def _expect(self, phase: Phase) -> None:
        if self.phase is not phase:
            raise SecAggError(f"secagg client {self.client_id}: expected phase {phase.value}, in {self.phase.value}")

    def advertise(self) -> AdvertiseKeys:
        self._expect(Phase.ADVERTISE)
        self.phase = Phase.SHARE_KEYS
        return AdvertiseKeys(self.client_id, self._cipher.public, self._mask.public, self.params.scheme)

    def share_keys(self, roster: Roster) -> ShareKeys:
        """Shamir-share the seeds of s_sk and of b among the neighbours in `roster`, one sealed bundle each."""
        self._expect(Phase.SHARE_KEYS)
        peers = {k: v for k, v in roster.keys.items() if k != self.client_id}
        strangers = sorted(set(peers) - set(self.neighbours))
        if strangers:
            raise SecAggError(f"roster names clients that are not neighbours of {self.client_id}: {strangers}")
        if any(k != v.client_id for k, v in peers.items()):
            raise SecAggError("roster entry filed under another client's id")
        if len(peers) < self.params.threshold:
            raise SecAggError(f"roster has {len(peers)} neighbours, the threshold is {self.params.threshold}")
        publics = [v.cipher_public for v in peers.values()] + [v.mask_public for v in peers.values()]
        publics += [self._cipher.public, self._mask.public]
        if len(set(publics)) != len(publics):
            raise SecAggError("roster repeats a public key (every client must have its own)")
        self._roster = dict(peers)
        holders = sorted(peers)
        scheme = self.params.scheme
        key_shares = split_secret(scheme, self._mask_seed, self.params.threshold, len(holders))
        seed_shares = split_secret(scheme, self._seed, self.params.threshold, len(holders))
        with_commitments = committed(scheme)
        sealed, commitments = {}, {}
        for holder, (index, k_share), (_, b_share) in zip(holders, key_shares, seed_shares):
            bundle = {"i": index, "k": b64(k_share), "b": b64(b_share)}
            if with_commitments:
                k_salt, b_salt = os.urandom(SALT_BYTES), os.urandom(SALT_BYTES)
                bundle |= {"ks": b64(k_salt), "bs": b64(b_salt)}
                rid = self.params.round_id
                commitments[holder] = (
                    share_commitment(rid, self.client_id, holder, KEY, index, k_share, k_salt),
                    share_commitment(rid, self.client_id, holder, SEED, index, b_share, b_salt),
                )
            key = self._pair_key(holder)
            sealed[holder] = seal(key, json.dumps(bundle).encode(), _aad(self.params, self.client_id, holder))
        self.phase = Phase.MASKED_INPUT
        if not with_commitments:
            return ShareKeys(self.client_id, sealed)
        return ShareKeys(
            self.client_id, sealed, commitments, seed_digest(self.params.round_id, self.client_id, self._seed)
        )

    def masked_input(self, delivery: ShareDelivery, vector: np.ndarray, weight: float = 1.0) -> np.ndarray:
        """Open the shares addressed to us, then encode the update and add every mask mod 2^b (uint64 words)."""
        return self.masked_words(delivery, vector, weight).astype(np.uint64, copy=False)

    def masked_words(
        self, delivery: ShareDelivery, vector: np.ndarray, weight: float = 1.0, minus: np.ndarray | None = None
    ) -> np.ndarray:
        """`masked_input` in the mask accumulator's words (uint32 where they are 4 bytes: `prg.accumulator_dtype`),
        as `pack` sends them: the update is added into the masks, with no uint64 copy of either. With `minus`
        the update is vector − minus (a trained vector and its global one), taken block by block."""
        self._expect(Phase.MASKED_INPUT)
        senders = sorted(delivery.sealed)
        unknown = [s for s in senders if s not in self._roster]
        if unknown:
            raise SecAggError(f"shares from clients not in {self.client_id}'s roster: {unknown}")
        if len(senders) < self.params.threshold:
            raise SecAggError(f"{len(senders)} neighbours shared keys, the threshold is {self.params.threshold}")
        if np.asarray(vector).shape != (self.params.length,):
            raise SecAggError(f"update must have {self.params.length} values, got shape {np.asarray(vector).shape}")
        for sender in senders:
            try:
                self._held[sender] = self._open(delivery, sender)
            except PeerShareError as e:
                if not committed(self.params.scheme):
                    raise  # no way to report it: the device leaves the round
                self._complaints.append(sender)  # stays: the sender is named in the unmask response
                log.warning("%s", e)
        fixed = self.params.fixed_point
        bits = fixed.bits
        ahead, self._ahead = self._ahead, None  # precompute_masks: PRG(b_u) and the roster's masks
        (acc, adder), included = ahead if ahead is not None else (self._self_masked(), {})
        masks = Agreement(self._mask)
        for v in senders:
            if v not in included:
                seed = pairwise_seed(self.params, masks, self._roster[v].mask_public, self.client_id, v)
                adder.add(acc, seed, pairwise_sign(self.client_id, v), bits)
        for v in sorted(set(included) - set(senders)):  # not in U2: its mask must not be in y
            adder.add(acc, included[v], -pairwise_sign(self.client_id, v), bits)
        fixed.add_encoded(acc, vector, weight, minus)  # sums commute mod 2^b: the update goes into the masks
        acc &= acc.dtype.type(int(fixed.modulus_mask))
        self.phase = Phase.UNMASK
        return acc

    def _open(self, delivery: ShareDelivery, sender: str) -> tuple[int, bytes, bytes, bytes, bytes]:
        """The shares `sender` sealed for us, checked against its commitments (committed scheme); PeerShareError."""
        key = self._pair_key(sender)
        try:
            body = json.loads(open_sealed(key, delivery.sealed[sender], _aad(self.params, sender, self.client_id)))
            held = (
                int(body["i"]),
                unb64(body["k"]),
                unb64(body["b"]),
                unb64(body.get("ks", "")),
                unb64(body.get("bs", "")),
            )
        except (SecAggError, ValueError, KeyError, TypeError, AttributeError) as e:  # the sender's doing, not ours
            raise PeerShareError(
                f"the share bundle {sender} sealed for {self.client_id} is unusable ({e}); "
                f"{self.client_id} {'reports it' if committed(self.params.scheme) else 'leaves this round'}"
            ) from None
        if committed(self.params.scheme):
            index, k_share, b_share, k_salt, b_salt = held
            ck, cb = delivery.commitments.get(sender, (b"", b""))
            rid, me = self.params.round_id, self.client_id
            expected = delivery.indices.get(sender)
            size = share_bytes(self.params.scheme)
            if (
                index != expected
                or any(len(y) != size or int.from_bytes(y, "big") >= PRIME for y in (k_share, b_share))
                or not opens(ck, rid, sender, me, KEY, index, k_share, k_salt)
                or not opens(cb, rid, sender, me, SEED, index, b_share, b_salt)
            ):
                raise PeerShareError(
                    f"the shares {sender} sealed for {self.client_id} do not match its commitments "
                    f"(or carry index {index}, not {expected}); {self.client_id} reports it"
                )
        return held

    def _pair_key(self, peer: str) -> bytes:
        """The AEAD key of our pair with `peer` (from the roster): the label orders the two ids, so the key
        that seals our bundle to `peer` is the one that opens `peer`'s bundle to us; derived once."""
        key = self._pair_keys.get(peer)
        if key is None:
            info = self.params.info("share", self.client_id, peer)
            key = self._pair_keys[peer] = self._share_keys.key(self._roster[peer].cipher_public, info)
        return key

    def precompute_masks(self, cancelled: Callable[[], bool] = lambda: False) -> bool:
        """PRG(b_u) + Σ_{v ∈ roster} sign(u, v)·PRG(s_uv) (mod 2^64, or 2^32: `prg.accumulator_dtype`), computed
        once the roster is checked (after share_keys) and before the share delivery names U2; `masked_input`
        then adds the encoded update and subtracts the masks of roster neighbours missing from the delivery,
        so y is the same as without it (the sum is taken mod 2^b in the end, and addition commutes). A neighbour whose key agreement fails is left to
        `masked_input` (which reports it only if that neighbour is in the delivery, as before).
        False, keeping nothing, when `cancelled()` turned true between two masks."""
        self._expect(Phase.MASKED_INPUT)
        bits = self.params.fixed_point.bits
        acc, adder = self._self_masked()
        masks, seeds = Agreement(self._mask), {}
        for v in sorted(self._roster):
            if cancelled():
                return False
            try:
                seed = pairwise_seed(self.params, masks, self._roster[v].mask_public, self.client_id, v)
            except SecAggError:
                continue
            adder.add(acc, seed, pairwise_sign(self.client_id, v), bits)
            seeds[v] = seed
        self._ahead = ((acc, adder), seeds)
        return True

    def _self_masked(self) -> tuple[np.ndarray, MaskAdder]:
        """PRG(b_u) in a fresh mask accumulator (uint32 where the words are 4 bytes), and the adder for more."""
        bits, scheme = self.params.fixed_point.bits, self.params.scheme
        acc = np.empty(self.params.length + 1, dtype=accumulator_dtype(scheme, bits))
        adder = MaskAdder(len(acc), scheme=scheme)
        adder.assign(acc, self_key(self.params, self._seed), bits)
        return acc, adder

    def unmask(self, request: UnmaskRequest) -> UnmaskResponse:
        """Key shares of dropped neighbours, seed shares of surviving ones — never both for one."""
        if self.phase not in (Phase.UNMASK, Phase.DONE):
            raise SecAggError(f"secagg client {self.client_id}: unmask asked in phase {self.phase.value}")
        dropped, survivors = set(request.dropped), set(request.survivors)
        if dropped & survivors:
            raise SecAggError(
                f"unmask request lists clients as both dropped and surviving: {sorted(dropped & survivors)}"
            )
        if self.client_id not in survivors:
            raise SecAggError(f"unmask request does not list {self.client_id}, which sent its masked input")
        if len(survivors) < self.params.threshold:
            raise SecAggError(f"only {len(survivors)} survivors, the threshold is {self.params.threshold}")
        keys = dropped & set(self._held)
        seeds = survivors & set(self._held)
        if keys & self._revealed_seeds or seeds & self._revealed_keys:
            raise SecAggError(
                f"unmask request contradicts an earlier one for {sorted((keys & self._revealed_seeds) | (seeds & self._revealed_keys))}"
            )
        self._revealed_keys |= keys
        self._revealed_seeds |= seeds
        self.phase = Phase.DONE
        salts = {v: self._held[v][3] for v in keys} | {v: self._held[v][4] for v in seeds}
        return UnmaskResponse(
            self.client_id,
            {v: (self._held[v][0], self._held[v][1]) for v in sorted(keys)},
            {v: (self._held[v][0], self._held[v][2]) for v in sorted(seeds)},
            dict(sorted(salts.items())) if committed(self.params.scheme) else {},
            tuple(sorted(set(self._complaints) & (dropped | survivors))),
        )
