from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VectorHeader(_message.Message):
    __slots__ = ("model_id", "round", "length", "dtype", "codec", "sha256", "chunk_size", "base_sha256", "payload_bytes", "digest")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    BASE_SHA256_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    round: int
    length: int
    dtype: str
    codec: str
    sha256: bytes
    chunk_size: int
    base_sha256: bytes
    payload_bytes: int
    digest: str
    def __init__(self, model_id: _Optional[str] = ..., round: _Optional[int] = ..., length: _Optional[int] = ..., dtype: _Optional[str] = ..., codec: _Optional[str] = ..., sha256: _Optional[bytes] = ..., chunk_size: _Optional[int] = ..., base_sha256: _Optional[bytes] = ..., payload_bytes: _Optional[int] = ..., digest: _Optional[str] = ...) -> None: ...

class VectorPart(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: VectorHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[VectorHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class ArtifactInfo(_message.Message):
    __slots__ = ("name", "sha256", "size")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    sha256: bytes
    size: int
    def __init__(self, name: _Optional[str] = ..., sha256: _Optional[bytes] = ..., size: _Optional[int] = ...) -> None: ...

class JoinRequest(_message.Message):
    __slots__ = ("device_name", "credential", "capabilities", "client_id")
    class CapabilitiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DEVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    device_name: str
    credential: str
    capabilities: _containers.ScalarMap[str, str]
    client_id: str
    def __init__(self, device_name: _Optional[str] = ..., credential: _Optional[str] = ..., capabilities: _Optional[_Mapping[str, str]] = ..., client_id: _Optional[str] = ...) -> None: ...

class JoinReply(_message.Message):
    __slots__ = ("client_id", "model_id", "manifest_json", "artifacts", "heartbeat_interval_ms", "max_chunk_bytes", "upload_codecs", "local_vector_dir", "update_digests", "hashes_local_files")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_JSON_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_CODECS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_VECTOR_DIR_FIELD_NUMBER: _ClassVar[int]
    UPDATE_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    HASHES_LOCAL_FILES_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    model_id: str
    manifest_json: str
    artifacts: _containers.RepeatedCompositeFieldContainer[ArtifactInfo]
    heartbeat_interval_ms: int
    max_chunk_bytes: int
    upload_codecs: _containers.RepeatedScalarFieldContainer[str]
    local_vector_dir: str
    update_digests: _containers.RepeatedScalarFieldContainer[str]
    hashes_local_files: bool
    def __init__(self, client_id: _Optional[str] = ..., model_id: _Optional[str] = ..., manifest_json: _Optional[str] = ..., artifacts: _Optional[_Iterable[_Union[ArtifactInfo, _Mapping]]] = ..., heartbeat_interval_ms: _Optional[int] = ..., max_chunk_bytes: _Optional[int] = ..., upload_codecs: _Optional[_Iterable[str]] = ..., local_vector_dir: _Optional[str] = ..., update_digests: _Optional[_Iterable[str]] = ..., hashes_local_files: bool = ...) -> None: ...

class ArtifactRequest(_message.Message):
    __slots__ = ("client_id", "model_id", "name")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    model_id: str
    name: str
    def __init__(self, client_id: _Optional[str] = ..., model_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ArtifactPart(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: ArtifactInfo
    chunk: bytes
    def __init__(self, header: _Optional[_Union[ArtifactInfo, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class TrainConfig(_message.Message):
    __slots__ = ("local_epochs", "batch_size", "learning_rate", "reset_optimizer", "seed", "extra", "prox_mu")
    class ExtraEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LOCAL_EPOCHS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    RESET_OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    PROX_MU_FIELD_NUMBER: _ClassVar[int]
    local_epochs: int
    batch_size: int
    learning_rate: float
    reset_optimizer: bool
    seed: int
    extra: _containers.ScalarMap[str, str]
    prox_mu: float
    def __init__(self, local_epochs: _Optional[int] = ..., batch_size: _Optional[int] = ..., learning_rate: _Optional[float] = ..., reset_optimizer: bool = ..., seed: _Optional[int] = ..., extra: _Optional[_Mapping[str, str]] = ..., prox_mu: _Optional[float] = ...) -> None: ...

class PollRequest(_message.Message):
    __slots__ = ("client_id", "model_id", "wait_ms")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    model_id: str
    wait_ms: int
    def __init__(self, client_id: _Optional[str] = ..., model_id: _Optional[str] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class PollTasksRequest(_message.Message):
    __slots__ = ("client_ids", "model_id", "wait_ms")
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    client_ids: _containers.RepeatedScalarFieldContainer[str]
    model_id: str
    wait_ms: int
    def __init__(self, client_ids: _Optional[_Iterable[str]] = ..., model_id: _Optional[str] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class ClientTask(_message.Message):
    __slots__ = ("client_id", "task")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    task: Task
    def __init__(self, client_id: _Optional[str] = ..., task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class PollTasksReply(_message.Message):
    __slots__ = ("round", "state", "tasks")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    round: int
    state: str
    tasks: _containers.RepeatedCompositeFieldContainer[ClientTask]
    def __init__(self, round: _Optional[int] = ..., state: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[ClientTask, _Mapping]]] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("kind", "round", "deadline_unix_ms", "config", "retry_after_ms", "vector_sha256", "vector_length", "secagg", "vector_blake3")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        WAIT: _ClassVar[Task.Kind]
        FIT: _ClassVar[Task.Kind]
        EVALUATE: _ClassVar[Task.Kind]
        DONE: _ClassVar[Task.Kind]
    WAIT: Task.Kind
    FIT: Task.Kind
    EVALUATE: Task.Kind
    DONE: Task.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    VECTOR_SHA256_FIELD_NUMBER: _ClassVar[int]
    VECTOR_LENGTH_FIELD_NUMBER: _ClassVar[int]
    SECAGG_FIELD_NUMBER: _ClassVar[int]
    VECTOR_BLAKE3_FIELD_NUMBER: _ClassVar[int]
    kind: Task.Kind
    round: int
    deadline_unix_ms: int
    config: TrainConfig
    retry_after_ms: int
    vector_sha256: bytes
    vector_length: int
    secagg: bytes
    vector_blake3: bytes
    def __init__(self, kind: _Optional[_Union[Task.Kind, str]] = ..., round: _Optional[int] = ..., deadline_unix_ms: _Optional[int] = ..., config: _Optional[_Union[TrainConfig, _Mapping]] = ..., retry_after_ms: _Optional[int] = ..., vector_sha256: _Optional[bytes] = ..., vector_length: _Optional[int] = ..., secagg: _Optional[bytes] = ..., vector_blake3: _Optional[bytes] = ...) -> None: ...

class VectorRequest(_message.Message):
    __slots__ = ("client_id", "model_id", "round", "cached_sha256", "digests")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    CACHED_SHA256_FIELD_NUMBER: _ClassVar[int]
    DIGESTS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    model_id: str
    round: int
    cached_sha256: bytes
    digests: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_id: _Optional[str] = ..., model_id: _Optional[str] = ..., round: _Optional[int] = ..., cached_sha256: _Optional[bytes] = ..., digests: _Optional[_Iterable[str]] = ...) -> None: ...

class Metric(_message.Message):
    __slots__ = ("value", "sync_dist")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SYNC_DIST_FIELD_NUMBER: _ClassVar[int]
    value: float
    sync_dist: bool
    def __init__(self, value: _Optional[float] = ..., sync_dist: bool = ...) -> None: ...

class UpdateHeader(_message.Message):
    __slots__ = ("client_id", "vector", "num_examples", "metrics", "trained_from_sha256", "local_file")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Metric
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Metric, _Mapping]] = ...) -> None: ...
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    NUM_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    TRAINED_FROM_SHA256_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FILE_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    vector: VectorHeader
    num_examples: int
    metrics: _containers.MessageMap[str, Metric]
    trained_from_sha256: bytes
    local_file: str
    def __init__(self, client_id: _Optional[str] = ..., vector: _Optional[_Union[VectorHeader, _Mapping]] = ..., num_examples: _Optional[int] = ..., metrics: _Optional[_Mapping[str, Metric]] = ..., trained_from_sha256: _Optional[bytes] = ..., local_file: _Optional[str] = ...) -> None: ...

class UpdatePart(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: UpdateHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[UpdateHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class SubmitReply(_message.Message):
    __slots__ = ("accepted", "duplicate", "round", "message")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    duplicate: bool
    round: int
    message: str
    def __init__(self, accepted: bool = ..., duplicate: bool = ..., round: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class BeginUploadRequest(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: UpdateHeader
    def __init__(self, header: _Optional[_Union[UpdateHeader, _Mapping]] = ...) -> None: ...

class UploadRef(_message.Message):
    __slots__ = ("client_id", "upload_id")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    upload_id: str
    def __init__(self, client_id: _Optional[str] = ..., upload_id: _Optional[str] = ...) -> None: ...

class UploadPartRequest(_message.Message):
    __slots__ = ("client_id", "upload_id", "offset", "data", "sha256")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    upload_id: str
    offset: int
    data: bytes
    sha256: bytes
    def __init__(self, client_id: _Optional[str] = ..., upload_id: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., sha256: _Optional[bytes] = ...) -> None: ...

class UploadState(_message.Message):
    __slots__ = ("upload_id", "offset", "payload_bytes", "max_part_bytes", "expires_unix_ms")
    UPLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_PART_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    upload_id: str
    offset: int
    payload_bytes: int
    max_part_bytes: int
    expires_unix_ms: int
    def __init__(self, upload_id: _Optional[str] = ..., offset: _Optional[int] = ..., payload_bytes: _Optional[int] = ..., max_part_bytes: _Optional[int] = ..., expires_unix_ms: _Optional[int] = ...) -> None: ...

class SecAggRequest(_message.Message):
    __slots__ = ("client_id", "model_id", "round", "step", "payload", "wait_ms")
    class Step(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ADVERTISE: _ClassVar[SecAggRequest.Step]
        SHARE: _ClassVar[SecAggRequest.Step]
        UNMASK_REQUEST: _ClassVar[SecAggRequest.Step]
        UNMASK: _ClassVar[SecAggRequest.Step]
    ADVERTISE: SecAggRequest.Step
    SHARE: SecAggRequest.Step
    UNMASK_REQUEST: SecAggRequest.Step
    UNMASK: SecAggRequest.Step
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    model_id: str
    round: int
    step: SecAggRequest.Step
    payload: bytes
    wait_ms: int
    def __init__(self, client_id: _Optional[str] = ..., model_id: _Optional[str] = ..., round: _Optional[int] = ..., step: _Optional[_Union[SecAggRequest.Step, str]] = ..., payload: _Optional[bytes] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class SecAggReply(_message.Message):
    __slots__ = ("ready", "payload")
    READY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    payload: bytes
    def __init__(self, ready: bool = ..., payload: _Optional[bytes] = ...) -> None: ...

class SecAggBatchRequest(_message.Message):
    __slots__ = ("steps", "wait_ms")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedCompositeFieldContainer[SecAggRequest]
    wait_ms: int
    def __init__(self, steps: _Optional[_Iterable[_Union[SecAggRequest, _Mapping]]] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class SecAggBatchEntry(_message.Message):
    __slots__ = ("client_id", "ready", "payload", "error_code", "error_message")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    ready: bool
    payload: bytes
    error_code: str
    error_message: str
    def __init__(self, client_id: _Optional[str] = ..., ready: bool = ..., payload: _Optional[bytes] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ...) -> None: ...

class SecAggBatchReply(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[SecAggBatchEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[SecAggBatchEntry, _Mapping]]] = ...) -> None: ...

class EvaluationResult(_message.Message):
    __slots__ = ("client_id", "model_id", "round", "num_examples", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Metric
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Metric, _Mapping]] = ...) -> None: ...
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    NUM_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    model_id: str
    round: int
    num_examples: int
    metrics: _containers.MessageMap[str, Metric]
    def __init__(self, client_id: _Optional[str] = ..., model_id: _Optional[str] = ..., round: _Optional[int] = ..., num_examples: _Optional[int] = ..., metrics: _Optional[_Mapping[str, Metric]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("client_id",)
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    def __init__(self, client_id: _Optional[str] = ...) -> None: ...

class HeartbeatReply(_message.Message):
    __slots__ = ("round", "state")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    round: int
    state: str
    def __init__(self, round: _Optional[int] = ..., state: _Optional[str] = ...) -> None: ...

class LeaveRequest(_message.Message):
    __slots__ = ("client_id", "reason")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    reason: str
    def __init__(self, client_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class LeaveReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RoundSummary(_message.Message):
    __slots__ = ("round", "state", "clients", "examples", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ROUND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CLIENTS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    round: int
    state: str
    clients: int
    examples: int
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, round: _Optional[int] = ..., state: _Optional[str] = ..., clients: _Optional[int] = ..., examples: _Optional[int] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("model_id", "current_round", "total_rounds", "state", "registered_clients", "active_clients", "rounds", "latest_model")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_ROUND_FIELD_NUMBER: _ClassVar[int]
    TOTAL_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    LATEST_MODEL_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    current_round: int
    total_rounds: int
    state: str
    registered_clients: int
    active_clients: int
    rounds: _containers.RepeatedCompositeFieldContainer[RoundSummary]
    latest_model: str
    def __init__(self, model_id: _Optional[str] = ..., current_round: _Optional[int] = ..., total_rounds: _Optional[int] = ..., state: _Optional[str] = ..., registered_clients: _Optional[int] = ..., active_clients: _Optional[int] = ..., rounds: _Optional[_Iterable[_Union[RoundSummary, _Mapping]]] = ..., latest_model: _Optional[str] = ...) -> None: ...
# generated from fedort_v1.proto, sha256 f73dadd82a68c5918de41adf4c9b95b806a7bc0fd7a4a470b59af84c6808d608
