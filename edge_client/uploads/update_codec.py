"""How a device encodes its trained update for upload: codec choice, delta, error feedback.

Codec choice (once per Join): the configured codec (`[edge] codec`, `--codec`, EdgeConfig.codec)
if the coordinator's JoinReply lists it in `upload_codecs` (`protos.codecs.allows`), else `raw`
with a warning — so a device configured for int8 still works with a coordinator that only takes
raw updates (every coordinator before codecs).

What is encoded: `raw` sends the trained vector itself (the unchanged path). Every lossy codec
encodes the delta d = trained - global from the global vector the client trained from, and the
header's `base_sha256` names that global vector; the coordinator adds it back.

Error feedback (top-k only): the device keeps the residual r it did not send and adds it to the
next delta: c = (trained - global) + r, payload = topk(c), r' = c - decode(payload). So the sum of
everything sent plus the final residual equals the sum of the true deltas. r' replaces r only once
the coordinator counted the upload (accepted or duplicate); an upload the round no longer takes
(stale, rejected) sent nothing that counted, so r' = c. Where r lives: in memory (one
`UpdateEncoder` per client object, so per simulated virtual client), and for a device that
persists its identity also durably in its cache folder, keyed by the identity (coordinator,
device name, data file) and the model id, as a journal (edge_client/uploads/feedback_journal.py):
c, the payload and the header fields are written atomically BEFORE the upload is sent, the
coordinator's answer (counted or not) after it. Crash semantics: a device killed anywhere in
between finds the journal unsettled when it starts again, and `join()` sends the same update again
before anything else: `accepted` (the round was still open and had not counted it) or `duplicate`
(it had) settle r', FAILED_PRECONDITION settles c — a coordinator of protocol 1.4 or later
answers `duplicate` for the same update also after its round closed (coordinator/engine/resubmission.py),
so its FAILED_PRECONDITION means the upload did not count. An older coordinator refuses that case
as stale too: the device then keeps c (nothing it computed is dropped; if that upload had counted
before the round closed, its top-k part is counted twice — once per such crash at most). The
journal costs what the bare residual file did: one atomic 4P-byte write per top-k upload, plus
a few bytes for the answer; raw, fp16, bf16 and int8 write nothing. In memory a residual costs
4P bytes per client object that trained with top-k — mind it when simulating many virtual
clients of a large model. A device that skips rounds keeps r and adds it to its next delta,
taken against the global it then trains from (r is a sum of deltas, not tied to one global).
The fraction of a top-k round follows the warm-up schedule (topk_warmup.py).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedort.common import digests
from fedort.common.errors import VectorError
from fedort.common.invariants import present
from fedort.edge_client.uploads.feedback_journal import JournalEntry, new_id, read_journal, write_journal, write_outcome
from fedort.edge_client.uploads.topk_warmup import TopkWarmup
from fedort.edge_client.uploads.update_headers import encoded_update_header, update_header
from fedort.protos.messages import Metric, UpdateHeader
from fedort.protos.update_codecs import CodecSpec, allows, get_codec, parse_codec
from fedort.protos.vector_stream import vector_digest

log = logging.getLogger("fedort.edge.codec")
_ROUNDING_STREAM = 0x1C0DEC  # keeps the rounding stream apart from the shuffling stream of the same seed


@dataclass(frozen=True)
class EncodedUpdate:
    """An update ready to stream: the raw vector, or a codec payload of the delta from `base_sha256`."""

    codec: str  # canonical spec
    vector: np.ndarray | None = None  # raw: the trained vector
    payload: bytes = b""  # other codecs: the encoded delta
    base_sha256: bytes = b""
    length: int = 0
    corrected: np.ndarray | None = None  # error feedback: delta + previous residual (None without feedback)
    residual: np.ndarray | None = None  # error feedback: what stays unsent if this upload counts
    trained_from: bytes = b""  # sha256 of the global vector the update was trained from
    journal: str = ""  # error feedback on disk: the id of this upload's journal

    @property
    def nbytes(self) -> int:
        """Bytes of vector data this update puts on the wire."""
        return self.vector.nbytes if self.vector is not None else len(self.payload)

    def stream(
        self,
        client_id: str,
        model_id: str,
        round: int,
        num_examples: int,
        metrics: Mapping[str, Metric],
        chunk_size: int,
        announced: Sequence[str] = (),
        digested: bool = True,
    ) -> tuple[UpdateHeader, np.ndarray | bytes]:
        """The update stream's header and body (what `Transport.submit_update` sends); its digest is BLAKE3 if the
        coordinator `announced` it (JoinReply.update_digests) and this device has it, else sha256. `digested=False`:
        the header's digest value is left empty for `LocalVectors.submit`, which computes it while writing the file."""
        digest, value = digests.choose(announced), (None if digested else b"")
        if self.vector is not None:
            header = update_header(
                client_id,
                model_id,
                round,
                self.vector,
                num_examples,
                metrics,
                chunk_size,
                self.trained_from,
                digest=digest,
                value=value,
            )
            return header, self.vector
        return encoded_update_header(
            client_id,
            model_id,
            round,
            self.payload,
            codec=self.codec,
            length=self.length,
            base_sha256=self.base_sha256,
            num_examples=num_examples,
            metrics=metrics,
            chunk_size=chunk_size,
            digest=digest,
            value=value,
        ), self.payload


class ResidualStore:
    """Error-feedback residuals by key, in memory and, when `folder` is given, durably on disk
    (a journal per upload: edge_client/uploads/feedback_journal.py)."""

    def __init__(self, folder: str | Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else None
        self._memory: dict[str, np.ndarray] = {}

    def _path(self, key: str, suffix: str) -> Path:
        return present(self.folder, "the journal folder") / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}{suffix}"

    def load(self, key: str, length: int) -> np.ndarray | None:
        if key in self._memory:
            r = self._memory[key]
            return r if len(r) == length else None
        if self.folder is None:
            return None
        entry = self.journal(key, length)
        if entry is not None:
            if entry.counted is None:
                log.warning(
                    "top-k upload of round %d: the coordinator's answer is unknown; keeping the whole "
                    "corrected delta as the residual",
                    entry.round,
                )
            r = entry.residual()
        else:
            try:
                data = self._path(key, ".f32").read_bytes()  # a bare residual (fedort before the journal)
            except OSError:
                return None
            if len(data) != 4 * length:
                return None
            r = np.frombuffer(data, dtype="<f4").copy()
        self._memory[key] = r
        return r

    def journal(self, key: str, length: int) -> JournalEntry | None:
        """The durable journal of `key`'s last top-k upload (None in memory, or if there is none)."""
        if self.folder is None:
            return None
        return read_journal(self._path(key, ".ef"), self._path(key, ".done"), length)

    def begin(self, key: str, entry: JournalEntry) -> None:
        """Durably journal an upload before it is sent (nothing to do in memory)."""
        if self.folder is not None:
            write_journal(self._path(key, ".ef"), entry)
            self._path(key, ".f32").unlink(missing_ok=True)

    def settle(self, key: str, update: EncodedUpdate, counted: bool) -> None:
        """Keep r' (counted) or c (not counted); on disk, record the answer to the upload's journal."""
        self._memory[key] = np.ascontiguousarray(update.residual if counted else update.corrected, dtype="<f4")
        if self.folder is not None and update.journal:
            write_outcome(self._path(key, ".done"), update.journal, counted)


def choose_codec(configured: str, allowed: Sequence[str]) -> CodecSpec:
    """The configured codec if the run allows it, else raw (logged)."""
    spec = parse_codec(configured or "raw")
    if allows(allowed, spec):
        return spec
    log.warning(
        "codec %s is not among the coordinator's upload codecs %s; uploading raw float32",
        spec.canonical,
        list(allowed) or ["raw"],
    )
    return parse_codec("raw")


def encoder_for(
    configured: str,
    allowed: Sequence[str],
    *,
    key: str,
    folder: str | Path | None = None,
    previous: UpdateEncoder | None = None,
    warmup: TopkWarmup | None = None,
) -> UpdateEncoder:
    """The encoder after a Join: codec by `choose_codec`; residuals durable under `folder` if given
    (else in memory), carried over from `previous` (an earlier Join of the same client object);
    top-k warm-up fractions (edge_client/uploads/topk_warmup.py) only where `allowed` admits them."""
    store = previous.store if previous is not None else ResidualStore(folder)
    return UpdateEncoder(choose_codec(configured, allowed), store=store, key=key, warmup=warmup, allowed=tuple(allowed))


class UpdateEncoder:
    """Encodes one client's updates with one codec; owns that client's error-feedback residual."""

    def __init__(
        self,
        spec: CodecSpec,
        *,
        store: ResidualStore | None = None,
        key: str = "",
        rng: np.random.Generator | None = None,
        warmup: TopkWarmup | None = None,
        allowed: Sequence[str] | None = None,
    ) -> None:
        self.spec = spec
        self.codec = get_codec(spec)
        self.warmup = warmup if warmup is not None else TopkWarmup(1.0, 0)
        self.allowed = allowed  # None: every warm-up spec may be sent (no coordinator to ask)
        self.store = store if store is not None else ResidualStore()
        self.key = key
        self.rng = rng if rng is not None else np.random.default_rng()

    @property
    def error_feedback(self) -> bool:
        return self.spec.name == "topk"

    def spec_for(self, round: int | None) -> CodecSpec:
        """The spec of round `round`'s upload: the warm-up's top-k fraction if the run allows it, else `spec`."""
        spec = self.warmup.spec(self.spec, round)
        return spec if spec == self.spec or self.allowed is None or allows(self.allowed, spec) else self.spec

    def encode(
        self,
        global_vector: np.ndarray,
        global_sha256: bytes,
        trained: np.ndarray,
        seed: int | None = None,
        round: int | None = None,
        num_examples: int = 0,
        metrics: Mapping[str, Metric] | None = None,
    ) -> EncodedUpdate:
        """The update to upload for `trained`, which was trained from `global_vector` (digest `global_sha256`).

        `seed` (the task's per-client, per-round seed) makes stochastic rounding reproducible;
        without one the encoder's own generator is used. `round` (the task's) picks the top-k
        warm-up fraction; without one the configured spec is used. With error feedback and a
        durable store, the upload (with `num_examples` and `metrics`, to send it again after a
        restart) is journaled before this returns."""
        global_sha256 = global_sha256 or vector_digest(global_vector)
        if not self.spec.lossy:
            return EncodedUpdate("raw", vector=trained, length=len(trained), trained_from=global_sha256)
        delta = np.subtract(trained, global_vector, dtype=np.float32)
        if self.error_feedback:
            residual = self.store.load(self.key, len(delta))
            if residual is not None:
                delta += residual
        spec = self.spec_for(round)
        codec = self.codec if spec == self.spec else get_codec(spec)
        try:
            rng = np.random.default_rng([int(seed), _ROUNDING_STREAM]) if seed is not None else self.rng
            payload = codec.encode(delta, rng)
        except VectorError as e:  # e.g. an fp16 overflow: this round goes raw, the next tries again
            log.warning("cannot encode this update with %s (%s); uploading raw float32", self.spec.canonical, e)
            return EncodedUpdate("raw", vector=trained, length=len(trained), trained_from=global_sha256)
        enc = EncodedUpdate(
            spec.canonical, payload=payload, base_sha256=global_sha256, length=len(delta), trained_from=global_sha256
        )
        if not self.error_feedback:
            return enc
        residual = delta - codec.decode(payload, len(delta))
        journal = ""
        if self.store.folder is not None:
            journal = new_id()
            self.store.begin(
                self.key,
                JournalEntry(
                    journal, round or 0, enc.codec, global_sha256, num_examples, dict(metrics or {}), delta, payload
                ),
            )
        return EncodedUpdate(
            enc.codec,
            payload=payload,
            base_sha256=global_sha256,
            length=len(delta),
            corrected=delta,
            residual=residual,
            trained_from=global_sha256,
            journal=journal,
        )

    def settle(self, update: EncodedUpdate, counted: bool) -> None:
        """Keep the residual once the coordinator answered: r' if the upload counted, else all of c."""
        if update.corrected is None:
            return
        self.store.settle(self.key, update, counted)

    def unsettled(self, length: int) -> tuple[JournalEntry, EncodedUpdate] | None:
        """A journaled top-k upload whose answer a previous process never recorded, and the same update to send
        again (its answer settles it); None without one (always for other codecs and in-memory residuals)."""
        if not self.error_feedback:
            return None
        entry = self.store.journal(self.key, length)
        if entry is None or entry.counted is not None:
            return None
        return entry, EncodedUpdate(
            entry.codec,
            payload=entry.payload,
            base_sha256=entry.base_sha256,
            length=entry.length,
            corrected=entry.corrected,
            residual=entry.sent_residual(),
            trained_from=entry.base_sha256,
            journal=entry.id,
        )

    def residual(self, length: int) -> np.ndarray | None:
        """The residual the next update adds (None before the first counted top-k upload)."""
        return self.store.load(self.key, length)


__all__ = ["EncodedUpdate", "ResidualStore", "UpdateEncoder", "choose_codec", "encoder_for"]
