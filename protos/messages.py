"""Typed values that cross the wire, and their conversion to and from protobuf messages.

Everything above this module (coordinator, edge client) works with these dataclasses; the
generated `fedort_v1_pb2` messages appear only here and in the gRPC glue on each side.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from fedort.common.round_state import RoundRowState, RoundState
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.vector_stream import VectorMeta

#: Under this many free bytes the state dir's filesystem counts as full (`Status.storage_full`).
STORAGE_FULL_BYTES = 1 << 20


class TaskKind(enum.IntEnum):
    WAIT = pb.Task.WAIT
    FIT = pb.Task.FIT
    EVALUATE = pb.Task.EVALUATE
    DONE = pb.Task.DONE


@dataclass(frozen=True)
class TrainConfig:
    """A round's local training recipe, sent with every FIT task."""

    local_epochs: int = 1
    batch_size: int = 32
    learning_rate: float = 0.01
    reset_optimizer: bool = True
    seed: int = 0
    extra: Mapping[str, str] = field(default_factory=dict)
    prox_mu: float = 0.0  # FedProx proximal weight μ (edge_client.fedprox); 0 = FedAvg

    def to_pb(self) -> pb.TrainConfig:
        return pb.TrainConfig(
            local_epochs=self.local_epochs,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            reset_optimizer=self.reset_optimizer,
            seed=self.seed,
            extra=dict(self.extra),
            prox_mu=self.prox_mu,
        )

    @classmethod
    def from_pb(cls, m: pb.TrainConfig) -> TrainConfig:
        return cls(m.local_epochs, m.batch_size, m.learning_rate, m.reset_optimizer, m.seed, dict(m.extra), m.prox_mu)


@dataclass(frozen=True)
class Task:
    """What a long-poll answers: the kind of work, for which round, by when."""

    kind: TaskKind
    round: int = 0
    deadline_unix_ms: int = 0
    config: TrainConfig = field(default_factory=TrainConfig)
    retry_after_ms: int = 0
    vector_sha256: bytes = b""
    vector_length: int = 0
    secagg: bytes = b""  # secure aggregation round: protos.secagg.task.SecAggTask JSON
    vector_blake3: bytes = b""  # protocol 1.5: the global vector's BLAKE3, for co-located devices' file check

    def to_pb(self) -> pb.Task:
        # protoc's .pyi types an enum field as its class; the runtime takes the int
        return pb.Task(
            kind=int(self.kind),  # type: ignore[arg-type]
            round=self.round,
            deadline_unix_ms=self.deadline_unix_ms,
            config=self.config.to_pb(),
            retry_after_ms=self.retry_after_ms,
            vector_sha256=self.vector_sha256,
            vector_length=self.vector_length,
            secagg=self.secagg,
            vector_blake3=self.vector_blake3,
        )

    @classmethod
    def from_pb(cls, m: pb.Task) -> Task:
        return cls(
            TaskKind(m.kind),
            m.round,
            m.deadline_unix_ms,
            TrainConfig.from_pb(m.config),
            m.retry_after_ms,
            bytes(m.vector_sha256),
            m.vector_length,
            bytes(m.secagg),
            bytes(m.vector_blake3),
        )


@dataclass(frozen=True)
class Metric:
    value: float
    sync_dist: bool = False


def metrics_to_pb(metrics: Mapping[str, Metric]) -> dict[str, pb.Metric]:
    return {k: pb.Metric(value=float(m.value), sync_dist=m.sync_dist) for k, m in metrics.items()}


def metrics_from_pb(metrics: Mapping[str, pb.Metric]) -> dict[str, Metric]:
    return {k: Metric(m.value, m.sync_dist) for k, m in metrics.items()}


def meta_to_pb(meta: VectorMeta) -> pb.VectorHeader:
    return pb.VectorHeader(
        model_id=meta.model_id,
        round=meta.round,
        length=meta.length,
        dtype=meta.dtype,
        codec=meta.codec,
        sha256=meta.sha256,
        chunk_size=meta.chunk_size,
        base_sha256=meta.base_sha256,
        payload_bytes=meta.payload_bytes,
        digest=meta.digest,
    )


def meta_from_pb(m: pb.VectorHeader) -> VectorMeta:
    return VectorMeta(
        m.model_id,
        m.round,
        m.length,
        bytes(m.sha256),
        m.dtype,
        m.codec,
        m.chunk_size,
        bytes(m.base_sha256),
        m.payload_bytes,
        m.digest,
    )


@dataclass(frozen=True)
class SubmitResult:
    """The coordinator's answer to an update or an evaluation: counted, already counted, or not."""

    accepted: bool
    duplicate: bool
    round: int
    message: str = ""

    def to_pb(self) -> pb.SubmitReply:
        return pb.SubmitReply(accepted=self.accepted, duplicate=self.duplicate, round=self.round, message=self.message)

    @classmethod
    def from_pb(cls, m: pb.SubmitReply) -> SubmitResult:
        return cls(m.accepted, m.duplicate, m.round, m.message)


@dataclass(frozen=True)
class UpdateHeader:
    """The first message of an update stream: who, which vector, on how many examples, metrics."""

    client_id: str
    vector: VectorMeta
    num_examples: int
    metrics: Mapping[str, Metric] = field(default_factory=dict)
    trained_from_sha256: bytes = b""  # the global vector the update was trained from (admission checks it)
    local_file: str = ""  # co-located device: the payload is this file in the coordinator's local dir

    def to_pb(self) -> pb.UpdateHeader:
        return pb.UpdateHeader(
            client_id=self.client_id,
            vector=meta_to_pb(self.vector),
            num_examples=self.num_examples,
            metrics=metrics_to_pb(self.metrics),
            trained_from_sha256=self.trained_from_sha256,
            local_file=self.local_file,
        )

    @classmethod
    def from_pb(cls, m: pb.UpdateHeader) -> UpdateHeader:
        return cls(
            m.client_id,
            meta_from_pb(m.vector),
            m.num_examples,
            metrics_from_pb(m.metrics),
            bytes(m.trained_from_sha256),
            m.local_file,
        )


@dataclass(frozen=True)
class UploadState:
    """Where a resumable upload stands (protocol 1.7): the next part starts at `offset`."""

    upload_id: str
    offset: int
    payload_bytes: int
    max_part_bytes: int
    expires_unix_ms: int

    def to_pb(self) -> pb.UploadState:
        return pb.UploadState(
            upload_id=self.upload_id,
            offset=self.offset,
            payload_bytes=self.payload_bytes,
            max_part_bytes=self.max_part_bytes,
            expires_unix_ms=self.expires_unix_ms,
        )

    @classmethod
    def from_pb(cls, m: pb.UploadState) -> UploadState:
        return cls(m.upload_id, m.offset, m.payload_bytes, m.max_part_bytes, m.expires_unix_ms)


@dataclass(frozen=True)
class RoundSummary:
    """One round as the Status RPC and `fedort coordinator status` show it."""

    round: int
    state: RoundRowState
    clients: int
    examples: int
    metrics: Mapping[str, float] = field(default_factory=dict)
    attempt: int = 1  # (not on the wire: the offline status reads it from the database)
    model_path: str | None = None
    message: str = ""

    def to_pb(self) -> pb.RoundSummary:
        return pb.RoundSummary(
            round=self.round,
            state=self.state.value,
            clients=self.clients,
            examples=self.examples,
            metrics=dict(self.metrics),
        )

    @classmethod
    def from_pb(cls, m: pb.RoundSummary) -> RoundSummary:
        return cls(m.round, RoundRowState.from_wire(m.state), m.clients, m.examples, dict(m.metrics))


#: gRPC metadata key of a Status call that names its device: after the run ends the coordinator
#: keeps serving until every device it released has asked for the outcome this way (or its grace ends)
OUTCOME_CLIENT_METADATA = "fedort-client-id"


@dataclass(frozen=True)
class Status:
    """What a coordinator's run looks like: rounds, clients and the latest model (the StatusReply)."""

    model_id: str
    current_round: int
    total_rounds: int
    state: RoundState
    registered_clients: int
    active_clients: int
    rounds: tuple[RoundSummary, ...]
    latest_model: str
    message: str = ""  # (not on the wire: why a run failed, from the database)
    latest_problem: str = ""  # (not on the wire: why the newest export is not listed, if it is corrupt or missing)
    storage_free_bytes: int | None = None  # (not on the wire: free bytes on the state dir's filesystem)

    @property
    def storage_full(self) -> bool:
        """The state dir's filesystem has (almost) no space left: the coordinator is waiting for some."""
        return self.storage_free_bytes is not None and self.storage_free_bytes < STORAGE_FULL_BYTES

    def to_pb(self) -> pb.StatusReply:
        return pb.StatusReply(
            model_id=self.model_id,
            current_round=self.current_round,
            total_rounds=self.total_rounds,
            state=self.state.name,
            registered_clients=self.registered_clients,
            active_clients=self.active_clients,
            latest_model=self.latest_model,
            rounds=[r.to_pb() for r in self.rounds],
        )

    @classmethod
    def from_pb(cls, m: pb.StatusReply) -> Status:
        return cls(
            m.model_id,
            m.current_round,
            m.total_rounds,
            RoundState.from_wire(m.state),
            m.registered_clients,
            m.active_clients,
            tuple(RoundSummary.from_pb(r) for r in m.rounds),
            m.latest_model,
        )
