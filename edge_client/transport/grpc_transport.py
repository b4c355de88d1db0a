"""The device's gRPC channel to the coordinator, and one typed method per RPC.

This is the edge side's wire boundary: protobuf messages are built and read here and nowhere else on the device;
callers get dataclasses, numpy vectors and `protos.errors` exceptions (`from_rpc_error`). Every call carries a
deadline and, when the device has one, its token (`authorization: Bearer <token>` metadata). The channel is TLS
unless `insecure=True` (the coordinator's certificate verified against `ca_file`, else the system roots; `cert_file`
+ `key_file` present a client certificate for mutual TLS). The channel sends HTTP/2 keepalive pings so an idle
connection through a NAT survives long local training, and allows messages a little larger than 1 MiB stream chunks.

One `Transport` may be shared by many clients (threads or virtual clients in a simulation worker); it is thread-safe
because grpc channels are. `cancel_inflight()` aborts the calls in progress, which is how a signal handler
interrupts a long-poll; a transport made with `stop=event` also cancels each call that starts once the event is set.
How a call runs is `_calls.py`; the vector download is assembled in `vector_download.py`, updates go out through
`update_upload.py`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import grpc
import numpy as np

from fedort.common.buffer_pool import BufferPool
from fedort.common.errors import ProtocolError
from fedort.common.round_state import RoundState
from fedort.edge_client.secagg.wire import StepBatcher
from fedort.edge_client.transport._calls import MAX_POLL_WAIT_MS, Calls
from fedort.edge_client.transport.channel import ChannelConfig
from fedort.edge_client.transport.update_upload import UpdateUploads
from fedort.edge_client.transport.vector_download import assemble_vector, vector_request, wants_blake3
from fedort.protos.messages import (
    OUTCOME_CLIENT_METADATA,
    Metric,
    Status,
    SubmitResult,
    Task,
    UpdateHeader,
    UploadState,
    metrics_to_pb,
)
from fedort.protos.stubs import fedort_v1_pb2 as pb

log = logging.getLogger("fedort.edge.transport")


@dataclass(frozen=True)
class ArtifactRef:
    """An artifact file as the coordinator announces it."""

    name: str
    sha256: str  # hex
    size: int


@dataclass(frozen=True)
class JoinInfo:
    """What Join answers: our identity, the run's model and how to talk to the coordinator."""

    client_id: str
    model_id: str
    manifest_json: str
    artifacts: tuple[ArtifactRef, ...]
    heartbeat_interval_ms: int
    max_chunk_bytes: int
    upload_codecs: tuple[str, ...] = ()  # codec specs the run accepts for updates (empty: raw only)
    local_vector_dir: str = ""  # co-located devices may pass vectors as files here (edge_client.local_vectors)
    update_digests: tuple[str, ...] = ()  # update digests accepted besides sha256 (protocol 1.3, protos.digests)
    hashes_local_files: bool = False  # a handed-over file's first attempt may leave its digest empty (protocol 1.6)


class Transport:
    """Typed calls to the coordinator over one grpc channel (see the module docstring)."""

    def __init__(
        self,
        config: ChannelConfig,
        channel: grpc.Channel | None = None,
        *,
        cancellable: bool = True,
        stop: threading.Event | None = None,
    ) -> None:
        self.config = config
        self.cancellable = cancellable
        self._calls = Calls(config, channel, cancellable, stop)
        self.uploads = UpdateUploads(self._calls)
        # downloaded vectors land in memory that earlier downloads used once nothing refers to it any more (the
        # cache keeps the last one): no fresh pages per download
        self._vectors = BufferPool(2)
        self.secagg_steps = StepBatcher(self)

    @classmethod
    def connect(cls, address: str, **options) -> Transport:
        return cls(ChannelConfig(address, **options))

    @property
    def channel(self) -> grpc.Channel:
        """The channel new calls go over (a call that ran out of time moves later ones to a new one)."""
        return self._calls.channel

    def close(self) -> None:
        self._calls.close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def cancel_inflight(self) -> None:
        """Cancel every call in progress (they raise CANCELLED in their callers)."""
        self._calls.cancel_inflight()

    def long_poll(self, name: str, request: Callable[[int], object], wait_ms: int):
        """A call the coordinator may hold up to wait_ms (at most MAX_POLL_WAIT_MS), plus the rpc timeout."""
        return self._calls.long_poll(name, request, wait_ms)

    # ---- RPCs -------------------------------------------------------------------------------

    def join(
        self, device_name: str, client_id: str = "", credential: str = "", capabilities: Mapping[str, str] | None = None
    ) -> JoinInfo:
        req = pb.JoinRequest(
            device_name=device_name, credential=credential, client_id=client_id, capabilities=dict(capabilities or {})
        )
        r = self._calls.unary("Join", req, self.config.rpc_timeout_s)
        return JoinInfo(
            client_id=r.client_id,
            model_id=r.model_id,
            manifest_json=r.manifest_json,
            artifacts=tuple(ArtifactRef(a.name, bytes(a.sha256).hex(), a.size) for a in r.artifacts),
            heartbeat_interval_ms=r.heartbeat_interval_ms,
            max_chunk_bytes=r.max_chunk_bytes,
            upload_codecs=tuple(r.upload_codecs),
            local_vector_dir=r.local_vector_dir,
            update_digests=tuple(r.update_digests),
            hashes_local_files=r.hashes_local_files,
        )

    def iter_artifact(self, client_id: str, model_id: str, name: str) -> Iterator[ArtifactRef | bytes]:
        """The artifact's header (an ArtifactRef) followed by its chunks."""
        req = pb.ArtifactRequest(client_id=client_id, model_id=model_id, name=name)
        first = True
        for part in self._calls.stream("DownloadArtifact", req, self.config.stream_timeout_s):
            kind = part.WhichOneof("part")
            if first:
                if kind != "header":
                    raise ProtocolError(f"artifact stream for {name!r} must start with a header, got {kind}")
                h = part.header
                yield ArtifactRef(h.name, bytes(h.sha256).hex(), h.size)
                first = False
            elif kind == "chunk":
                yield part.chunk
            else:
                raise ProtocolError(f"artifact stream for {name!r} carries a second header")
        if first:
            raise ProtocolError(f"artifact stream for {name!r} was empty")

    def poll(self, client_id: str, model_id: str, wait_ms: int) -> Task:
        return Task.from_pb(
            self.long_poll(
                "PollTask", lambda w: pb.PollRequest(client_id=client_id, model_id=model_id, wait_ms=w), wait_ms
            )
        )

    def poll_tasks(self, client_ids: list[str], model_id: str, wait_ms: int) -> tuple[int, RoundState, dict[str, Task]]:
        """One PollTasks call: (round, state, {client id: task} for the clients that have work; the rest WAIT).
        A coordinator older than PollTasks answers UNIMPLEMENTED (a FedortError with that code)."""
        r = self.long_poll(
            "PollTasks",
            lambda w: pb.PollTasksRequest(client_ids=list(client_ids), model_id=model_id, wait_ms=w),
            wait_ms,
        )
        return r.round, RoundState.from_wire(r.state), {t.client_id: Task.from_pb(t.task) for t in r.tasks}

    def secagg_step(
        self, client_id: str, model_id: str, round: int, step: int, payload: bytes, wait_ms: int
    ) -> tuple[bool, bytes]:
        """One secure-aggregation step (held up to wait_ms until its phase closes): (ready, reply payload).
        Steps that clients sharing this transport send together travel in one SecAggBatch (edge_client.secagg_wire)."""
        return self.secagg_steps.submit(client_id, model_id, round, step, payload, wait_ms)

    def download_vector(
        self,
        client_id: str,
        model_id: str,
        round: int,
        *,
        expected_length: int | None = None,
        expected_sha256: bytes | None = None,
    ) -> np.ndarray:
        """The global vector of `round`, checked against its header (and what the Task announced)."""
        return self.download_global(
            client_id, model_id, round, expected_length=expected_length, expected_sha256=expected_sha256
        )[0]

    def download_global(
        self,
        client_id: str,
        model_id: str,
        round: int,
        *,
        expected_length: int | None = None,
        expected_sha256: bytes | None = None,
        expected_blake3: bytes | None = None,
        base: tuple[bytes, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, int]:
        """(vector, bytes received): like `download_vector`; with `base` (a cached (digest, vector)) the
        coordinator may send the lossless `xor+zstd` delta against it, rebuilt and checked here. With
        `expected_blake3` (Task.vector_blake3) and the `blake3` package here, the device asks for the vector
        checked with BLAKE3 (VectorRequest.digests, protocol 1.6; faster than sha256), whose header value
        must then equal it; a coordinator that sends sha256 instead is checked against `expected_sha256`."""
        blake3 = wants_blake3(expected_blake3)
        parts = self._calls.stream(
            "DownloadVector", vector_request(client_id, model_id, round, base, blake3), self.config.stream_timeout_s
        )
        return assemble_vector(
            parts,
            round,
            expected_length=expected_length,
            expected_sha256=expected_sha256,
            expected_blake3=expected_blake3 if blake3 else None,
            base=base,
            out=self._vectors.take,
        )

    # updates (edge_client.transport.update_upload); the resumable steps are driven by edge_client.uploads.resumable
    def submit_update(self, header: UpdateHeader, vector: np.ndarray | bytes) -> SubmitResult:
        """Stream the update (header, then chunks); returns once the coordinator answered."""
        return self.uploads.submit_update(header, vector)

    def begin_upload(self, header: UpdateHeader) -> UploadState:
        return self.uploads.begin_upload(header)

    def put_upload_part(self, client_id: str, upload_id: str, offset: int, data: bytes, sha256: bytes) -> UploadState:
        return self.uploads.put_upload_part(client_id, upload_id, offset, data, sha256)

    def get_upload(self, client_id: str, upload_id: str) -> UploadState:
        return self.uploads.get_upload(client_id, upload_id)

    def commit_upload(self, client_id: str, upload_id: str) -> SubmitResult:
        return self.uploads.commit_upload(client_id, upload_id)

    def submit_evaluation(
        self, client_id: str, model_id: str, round: int, num_examples: int, metrics: Mapping[str, Metric]
    ) -> SubmitResult:
        req = pb.EvaluationResult(
            client_id=client_id,
            model_id=model_id,
            round=round,
            num_examples=num_examples,
            metrics=metrics_to_pb(metrics),
        )
        return SubmitResult.from_pb(self._calls.unary("SubmitEvaluation", req, self.config.rpc_timeout_s))

    def heartbeat(self, client_id: str, timeout_s: float | None = None) -> tuple[int, RoundState]:
        """The coordinator's current round and state."""
        r = self._calls.unary(
            "Heartbeat", pb.HeartbeatRequest(client_id=client_id), timeout_s or self.config.rpc_timeout_s
        )
        return r.round, RoundState.from_wire(r.state)

    def leave(self, client_id: str, reason: str, timeout_s: float | None = None, after_stop: bool = False) -> None:
        """`after_stop`: the Leave of a client on its way out, sent even though the transport's stop is set."""
        request = pb.LeaveRequest(client_id=client_id, reason=reason)
        self._calls.unary("Leave", request, timeout_s or self.config.rpc_timeout_s, after_stop=after_stop)

    def status(self, client_id: str = "") -> Status:
        """The run's status; `client_id` (metadata `fedort-client-id`) tells a coordinator whose run has
        ended that this device has now learnt the outcome, so it need not keep serving for it."""
        extra = ((OUTCOME_CLIENT_METADATA, client_id),) if client_id else ()
        return Status.from_pb(self._calls.unary("Status", pb.StatusRequest(), self.config.rpc_timeout_s, extra))


__all__ = ["ArtifactRef", "ChannelConfig", "JoinInfo", "MAX_POLL_WAIT_MS", "Status", "SubmitResult", "Transport"]
