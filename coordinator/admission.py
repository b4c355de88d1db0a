"""Upload admission: the one place that checks an update's header before any byte of it is stored.

Checked in protocol order, each failure a `protos.errors` exception the servicer maps to a
status code: the model id (FAILED_PRECONDITION), the round is open and is the one named
(FAILED_PRECONDITION), the client was selected, not already counted (a duplicate is drained and
acknowledged) nor being stored (UNAVAILABLE, retry); then the vector header: dtype and codec (a
codec is accepted iff the aggregation pipeline has a decoder for it), the model's length
(INVALID_ARGUMENT), num_examples in range, and the size limit (RESOURCE_EXHAUSTED).
"""

from __future__ import annotations

from dataclasses import replace

from fedort.coordinator.aggregation import codecs, decoder_for
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.training_round import TrainingRound
from fedort.protos.codec import VectorAssembler, check_vector_header
from fedort.protos.errors import ProtocolError, StaleRoundError, UnavailableError, WrongModelError
from fedort.protos.messages import UpdateHeader
from fedort.protos.round_state import RoundState


def check_model(model_id: str, expected: str) -> None:
    if model_id != expected:
        raise WrongModelError(f"request names model {model_id[:16] or '(none)'}…, this run trains model "
                              f"{expected[:16]}…")


def check_open(state: RoundState, current: int, open_round: TrainingRound | None, client_id: str, round: int) -> None:
    """The round `round` accepts updates from `client_id` now (StaleRoundError says why not)."""
    if state is not RoundState.TRAINING or open_round is None or open_round.closing:
        raise StaleRoundError(f"round {round} is not open for updates; no round is open now "
                              f"(state {state.name}, round {current})")
    if round != open_round.round:
        raise StaleRoundError(f"round {round} is not open for updates; the open round is {open_round.round}")
    if client_id not in open_round.selected:
        raise StaleRoundError(f"client {client_id} was not selected for round {round}; "
                              f"poll for a task before submitting")


def check_not_pending(open_round: TrainingRound, client_id: str) -> None:
    if client_id in open_round.pending:
        raise UnavailableError(f"an update of client {client_id} for round {open_round.round} is being stored; retry")


def admit_update(h: UpdateHeader, *, model_id: str, length: int, config: CoordinatorConfig, state: RoundState,
                 current: int, open_round: TrainingRound | None) -> VectorAssembler | None:
    """The assembler to receive the update into, or None for a duplicate (drain the stream and acknowledge)."""
    check_model(h.vector.model_id, model_id)
    check_open(state, current, open_round, h.client_id, h.vector.round)
    if h.client_id in open_round.reported:
        return None
    check_not_pending(open_round, h.client_id)
    meta = h.vector
    check_vector_header(meta, codecs=codecs(), expected_length=length)
    if not 1 <= h.num_examples <= config.max_examples:
        raise ProtocolError(f"num_examples must be in 1..{config.max_examples}, got {h.num_examples}")
    words = decoder_for(meta.codec).payload_words(length)   # a codec's payload may differ from P float32
    if words != length:
        meta = replace(meta, length=words)
    return VectorAssembler(meta, expected_length=words, max_length=config.max_vector_length * words // max(length, 1),
                           max_chunk_bytes=config.max_chunk_bytes, codecs=codecs())
