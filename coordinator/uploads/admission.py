"""Upload admission: the one place that checks an update's header before any byte of it is stored.

Checked in protocol order, each failure a `protos.errors` exception the servicer maps to a
status code: the model id (FAILED_PRECONDITION), the round is open and is the one named
(FAILED_PRECONDITION), the client was selected, not already counted (a duplicate is drained and
acknowledged) nor being stored (UNAVAILABLE, retry); then the vector header: dtype, the model's
length (INVALID_ARGUMENT) and the size limit (RESOURCE_EXHAUSTED); the codec: registered with
the aggregation pipeline and allowed by the run (INVALID_ARGUMENT), `payload_bytes` possible for
the codec's layout (INVALID_ARGUMENT); which global vector the update was trained from
(`trained_from_sha256`, and for a delta codec `base_sha256`, which must agree): this round's, or
the work is stale (FAILED_PRECONDITION); num_examples in 1..cap (INVALID_ARGUMENT), where the cap
is the number of examples the device announced at Join (its `examples` capability) and never more
than the run's `max_examples`, so no device can weigh more than its own data set says (a
masked update's weight is instead clamped to the cohort's largest announcement,
`protos.secagg.task`). The asynchronous mode admits
with `admit_async_update`: the round field is the base version b the update was trained from,
and the header must name version b's global vector (a delta codec's base is that vector too).

Binding an update to the round's global vector (against replay into the next round): a device's
round-r bytes re-sent with only the round field changed name round r's global vector, so they
are refused as stale, and the device's genuine round r+1 update still counts. A header naming no
global vector at all (a device from before this field) is refused with INVALID_ARGUMENT telling
to upgrade it: accepting it would reopen exactly that replay. The header is not signed: this
stops replays of recorded streams, not a device that lies about what it trained from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from fedort.common import digests
from fedort.common.errors import (
    ProtocolError,
    ResourceExhaustedError,
    StaleRoundError,
    UnavailableError,
    VectorError,
    WrongModelError,
)
from fedort.common.invariants import present
from fedort.common.round_state import RoundState
from fedort.common.secagg.pack import is_masked
from fedort.coordinator.aggregation import Decoder, codecs, decoder_for
from fedort.coordinator.aggregation.decode import family
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.engine.training_round import GlobalVector, TrainingRound
from fedort.coordinator.uploads.metric_limits import check_metrics
from fedort.protos.messages import UpdateHeader
from fedort.protos.update_codecs import parse_codec
from fedort.protos.vector_stream import DTYPES


@dataclass(frozen=True)
class AdmittedUpdate:
    """An admitted header and what receiving it needs: its decoder, payload size and (for a delta) the base."""

    header: UpdateHeader
    decoder: Decoder
    payload_bytes: int
    base: np.ndarray | None  # the round's global vector when the payload is a delta from it


def check_model(model_id: str, expected: str) -> None:
    if model_id != expected:
        raise WrongModelError(
            f"request names model {model_id[:16] + '…' if model_id else '(none)'}, this run trains model {expected[:16]}…"
        )


def check_open(
    state: RoundState, current: int, open_round: TrainingRound | None, client_id: str, round: int
) -> TrainingRound:
    """The open round, if round `round` accepts updates from `client_id` now (StaleRoundError says why not)."""
    if state is not RoundState.TRAINING or open_round is None or open_round.closing:
        raise StaleRoundError(
            f"round {round} is not open for updates; no round is open now (state {state.name}, round {current})"
        )
    if round != open_round.round:
        raise StaleRoundError(f"round {round} is not open for updates; the open round is {open_round.round}")
    if client_id not in open_round.selected:
        raise StaleRoundError(
            f"client {client_id} was not selected for round {round}; poll for a task before submitting"
        )
    return open_round


def check_not_pending(open_round: TrainingRound, client_id: str) -> None:
    if client_id in open_round.pending:
        raise UnavailableError(f"an update of client {client_id} for round {open_round.round} is being stored; retry")


def allowed_codecs(config: CoordinatorConfig) -> list[str]:
    """The codec specs this run accepts (JoinReply.upload_codecs): the configured list, else every registered
    family; entries with a parameter in canonical spelling (`int8:256` -> `int8`, as devices send it)."""
    listed = [_canonical(c) for c in config.uploads.codecs] or [c for c in codecs() if not is_masked(c)]
    return listed if "raw" in listed else ["raw", *listed]


def accepted_digests(config: CoordinatorConfig) -> list[str]:
    """The update digests this coordinator takes besides sha256 (JoinReply.update_digests): the configured ones
    this process can compute."""
    have = digests.available()
    return [d for d in dict.fromkeys(config.uploads.update_digests) if d != digests.SHA256 and d in have]


def _canonical(spec: str) -> str:
    if ":" not in spec:
        return spec
    try:
        return parse_codec(spec).canonical
    except VectorError:
        return spec  # another codec's grammar (a plug-in decoder): compared as written


def codec_allowed(allowed: Iterable[str], codec: str) -> bool:
    """An entry with a parameter admits exactly that spec; a family name admits all of its parameters."""
    return codec == "raw" or any(entry == codec or (":" not in entry and entry == family(codec)) for entry in allowed)


def check_trained_from(h: UpdateHeader, decoder: Decoder, want: bytes, trains_from: str) -> None:
    """The update was trained from (and, for a delta, is relative to) the global vector `want`
    (`trains_from` names it in messages: "round r trains from", "version b is")."""
    meta = h.vector
    for name, value in (("trained_from_sha256", h.trained_from_sha256), ("base_sha256", meta.base_sha256)):
        if value and len(value) != 32:
            raise VectorError(f"header {name} must be empty or 32 bytes, got {len(value)}")
    if decoder.delta and not meta.base_sha256:
        raise VectorError(
            f"codec {meta.codec} encodes the difference from the round's global vector; "
            f"the header's base_sha256 must name it ({want.hex()[:16]}…), it is empty"
        )
    if not decoder.delta and meta.base_sha256:
        raise VectorError(f"codec {meta.codec or 'raw'} carries the update itself; base_sha256 must be empty")
    if meta.base_sha256 and h.trained_from_sha256 and meta.base_sha256 != h.trained_from_sha256:
        raise VectorError("header base_sha256 and trained_from_sha256 name different vectors")
    trained_from = h.trained_from_sha256 or meta.base_sha256
    if not trained_from:
        raise ProtocolError(
            "update header does not name the global vector it was trained from "
            "(trained_from_sha256); this coordinator refuses such updates so that an older update "
            "cannot be replayed: upgrade the device's fedort to one that sends it"
        )
    if trained_from != want:
        raise StaleRoundError(
            f"update was trained from global vector {trained_from.hex()[:16]}…, but "
            f"{trains_from} {want.hex()[:16]}…: stale work, poll for the current task"
        )


def examples_cap(config: CoordinatorConfig, announced: str | None) -> tuple[int, str]:
    """The most examples one update may claim, and why: what the device announced at Join, at most max_examples."""
    if announced and announced.isdigit() and 0 < int(announced) < config.uploads.max_examples:
        return int(announced), "the examples the device announced at Join"
    return config.uploads.max_examples, "max_examples"


def admit_update(
    h: UpdateHeader,
    *,
    model_id: str,
    length: int,
    config: CoordinatorConfig,
    state: RoundState,
    current: int,
    open_round: TrainingRound | None,
    global_vector: GlobalVector | None,
    announced: str | None = None,
) -> AdmittedUpdate | None:
    """What to receive the update with, or None for a duplicate (drain the stream and acknowledge)."""
    check_model(h.vector.model_id, model_id)
    open_round = check_open(state, current, open_round, h.client_id, h.vector.round)
    if h.client_id in open_round.reported:
        return None
    check_not_pending(open_round, h.client_id)
    global_vector = present(global_vector, "the global vector")
    decoder, payload_bytes = check_update(
        h,
        length=length,
        config=config,
        trained_from=global_vector.sha256,
        announced=announced,
        trains_from=f"round {global_vector.round} trains from",
    )
    return AdmittedUpdate(h, decoder, payload_bytes, global_vector.vector if decoder.delta else None)


def check_update(
    h: UpdateHeader,
    *,
    length: int,
    config: CoordinatorConfig,
    trained_from: bytes,
    trains_from: str,
    announced: str | None = None,
) -> tuple[Decoder, int]:
    """The vector header, codec, payload size, global vector and num_examples checks; (decoder, payload bytes)."""
    meta = h.vector
    if meta.dtype not in DTYPES:
        raise VectorError(f"vector dtype must be one of {sorted(DTYPES)}, got {meta.dtype!r}")
    if meta.length != length:
        raise VectorError(f"vector must have {length} elements for this model, header says {meta.length}")
    if meta.length > config.uploads.max_vector_length:
        raise ResourceExhaustedError(
            f"vector of {meta.length} elements exceeds the limit of {config.uploads.max_vector_length}"
        )
    digests.check_accepted(meta.digest, accepted_digests(config))
    if len(meta.sha256) != 32 and not (h.local_file and not meta.sha256):  # a file's: hashed when taken (1.6)
        raise VectorError(
            f"header {meta.digest or 'sha256'} must be 32 bytes, got {len(meta.sha256)} (only an update "
            "handed over as a local_file may leave it empty)"
        )
    codec = meta.codec or "raw"
    decoder = decoder_for(codec)
    allowed = allowed_codecs(config)
    if not is_masked(codec) and not codec_allowed(allowed, codec):  # masked: exactly under --secagg (uploads)
        raise VectorError(f"update codec {codec!r} is not allowed in this run; allowed: {allowed}")
    payload_bytes = decoder.payload_bytes(length, meta.payload_bytes)
    check_trained_from(h, decoder, trained_from, trains_from)
    check_metrics(h.metrics)
    # a masked update's weight is clamped to the cohort's largest announcement by its fixed-point encoding
    cap, why = examples_cap(config, None if is_masked(codec) else announced)
    if not 1 <= h.num_examples <= cap:
        raise ProtocolError(f"num_examples must be in 1..{cap} ({why}), got {h.num_examples}")
    return decoder, payload_bytes


def admit_async_update(
    h: UpdateHeader,
    *,
    length: int,
    config: CoordinatorConfig,
    base_sha256: bytes,
    base_vector: Callable[[], np.ndarray],
    announced: str | None = None,
) -> AdmittedUpdate:
    """Asynchronous mode: an update trained from version b = `h.vector.round` (its staleness and
    duplicates are checked by the async intake first) must name version b's global vector, whose
    sha256 is `base_sha256` (FAILED_PRECONDITION otherwise); a delta codec's payload is relative to
    that vector (`base_vector()`, read only then), not to the current version's."""
    base = h.vector.round
    decoder, payload_bytes = check_update(
        h,
        length=length,
        config=config,
        trained_from=base_sha256,
        announced=announced,
        trains_from=f"version {base} (the round field) is global vector",
    )
    return AdmittedUpdate(h, decoder, payload_bytes, base_vector() if decoder.delta else None)
