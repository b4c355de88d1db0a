"""The device's gRPC channel to the coordinator, and one typed method per RPC.

This is the edge side's wire boundary: protobuf messages are built and read here and nowhere else on the device;
callers get dataclasses, numpy vectors and `protos.errors` exceptions (`from_rpc_error`). Every call carries a
deadline and, when the device has one, its token (`authorization: Bearer <token>` metadata). The channel is TLS
unless `insecure=True` (the coordinator's certificate verified against `ca_file`, else the system roots; `cert_file`
+ `key_file` present a client certificate for mutual TLS). The channel sends HTTP/2 keepalive pings so an idle
connection through a NAT survives long local training, and allows messages a little larger than 1 MiB stream chunks.

One `Transport` may be shared by many clients (threads or virtual clients in a simulation worker); it is thread-safe
because grpc channels are. `cancel_inflight()` aborts the calls in progress, which is how a signal handler
interrupts a long-poll.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np

from fedort.common import digests
from fedort.common.buffer_pool import BufferPool
from fedort.common.errors import FedortError, ProtocolError, UnavailableError
from fedort.common.round_state import RoundState
from fedort.edge_client.secagg.wire import StepBatcher
from fedort.edge_client.transport.channel import ChannelConfig
from fedort.edge_client.transport.download_delta import DeltaDownload
from fedort.edge_client.transport.tls_hints import with_plaintext_hint, with_tls_hint
from fedort.protos.messages import (
    OUTCOME_CLIENT_METADATA,
    Metric,
    Status,
    SubmitResult,
    Task,
    UpdateHeader,
    UploadState,
    meta_from_pb,
    metrics_to_pb,
)
from fedort.protos.status_codes import from_rpc_error
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc
from fedort.protos.update_codecs import iter_payload_chunks
from fedort.protos.update_codecs.xor_delta import DOWNLOAD_DELTA
from fedort.protos.update_part import parse_vector_part, part_kind
from fedort.protos.vector_stream import CHUNK_BYTES, VectorAssembler, iter_chunks

log = logging.getLogger("fedort.edge.transport")

#: grpc's details for a call this side cancelled (any other CANCELLED came from the coordinator).
_LOCAL_CANCEL = "Locally cancelled by application!"

#: Longest hold the coordinator grants a long-poll (protocol semantics 3).
MAX_POLL_WAIT_MS = 30_000


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

    def __init__(self, config: ChannelConfig, channel: grpc.Channel | None = None, *, cancellable: bool = True) -> None:
        self.config = config
        self.cancellable = cancellable
        self._channel = channel or config.open_channel()
        self._metadata = config.metadata()
        self._stub = _stub(self._channel)
        # downloaded vectors land in memory that earlier downloads used once nothing refers to it any more (the
        # cache keeps the last one): no fresh pages per download, which a VM's host may hand out slowly
        self._vectors = BufferPool(2)
        self._lock = threading.RLock()  # RLock: cancel_inflight may run in a signal handler
        self._inflight: set = set()
        self._uses: dict[grpc.Channel, int] = {}  # calls in progress per channel (a retired one closes at 0)
        self._closed = False
        self.secagg_steps = StepBatcher(self)

    @classmethod
    def connect(cls, address: str, **options) -> Transport:
        return cls(ChannelConfig(address, **options))

    def close(self) -> None:
        self.cancel_inflight()
        with self._lock:
            self._closed = True
            channels = {*self._uses, self._channel}
        for channel in channels:
            channel.close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def cancel_inflight(self) -> None:
        """Cancel every call in progress (they raise CANCELLED in their callers)."""
        with self._lock:
            calls = list(self._inflight)
        for call in calls:
            call.cancel()

    # ---- plumbing ---------------------------------------------------------------------------

    def _track(self, call) -> None:
        with self._lock:
            self._inflight.add(call)

    def _untrack(self, call) -> None:
        with self._lock:
            self._inflight.discard(call)

    @contextmanager
    def _using(self, name: str) -> Iterator[Any]:  # a grpc multi-callable (untyped)
        """The stub method `name` on the current channel, counted as a call in progress on that channel while
        the block runs; a channel `_redial` retired is closed when its last call ends."""
        with self._lock:
            channel = self._channel
            self._uses[channel] = self._uses.get(channel, 0) + 1
            method = getattr(self._stub, name)
        try:
            yield method
        finally:
            with self._lock:
                self._uses[channel] -= 1
                done = self._uses[channel] == 0 and channel is not self._channel
                if self._uses[channel] == 0:
                    del self._uses[channel]
            if done:
                channel.close()

    def _unary(self, name: str, request, timeout: float, metadata: tuple = ()):
        """Run a unary (or stream-unary) call as a cancellable future and wait for it (blocking if not cancellable)."""
        call_metadata = (tuple(self._metadata or ()) + tuple(metadata)) or None
        with self._using(name) as method:
            if not self.cancellable:
                try:
                    return method(request, timeout=timeout, metadata=call_metadata)
                except grpc.RpcError as e:
                    raise self._error(e) from None
            try:
                future = method.future(request, timeout=timeout, metadata=call_metadata)
            except grpc.RpcError as e:
                raise self._error(e) from None
            self._track(future)
            try:
                return future.result()
            except grpc.RpcError as e:
                raise self._error(e) from None
            except grpc.FutureCancelledError:
                raise _cancelled() from None
            finally:
                self._untrack(future)

    def _error(self, e: grpc.RpcError) -> FedortError:
        """`from_rpc_error`, plus: the coordinator cancelling is retryable, a deadline that ran out redials, and a
        TLS failure says what to check."""
        exc = from_rpc_error(e)
        details = (e.details() if hasattr(e, "details") else "") or ""
        if exc.code == "CANCELLED" and details != _LOCAL_CANCEL:
            # the coordinator cancelled the call (it is stopping or restarting), not us: retryable
            return UnavailableError(
                f"UNAVAILABLE: the coordinator cancelled the call ({details}); it is probably restarting"
            )
        if exc.code == "DEADLINE_EXCEEDED":
            self._redial()
        if exc.code == "UNAVAILABLE":
            return with_plaintext_hint(exc, details) if self.config.insecure else with_tls_hint(exc, details)
        return exc

    def _redial(self) -> None:
        """A call ran out of time: later calls go over a new connection, since this one may be half-open (a
        coordinator gone without a reset keeps streams hanging); the old channel closes once its calls ended."""
        with self._lock:
            if self._closed:
                return
            old = self._channel
            self._channel = self.config.open_channel(own_connection=True)
            self._stub = _stub(self._channel)
            idle = old not in self._uses
        if idle:
            old.close()

    def _stream(self, name: str, request, timeout: float) -> Iterator:
        with self._using(name) as method:
            try:
                call = method(request, timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as e:
                raise self._error(e) from None
            self._track(call)
            try:
                yield from call
            except grpc.RpcError as e:
                raise self._error(e) from None
            finally:
                call.cancel()  # no-op once complete; frees the stream if the caller stopped early
                self._untrack(call)

    # ---- RPCs -------------------------------------------------------------------------------

    def join(
        self, device_name: str, client_id: str = "", credential: str = "", capabilities: Mapping[str, str] | None = None
    ) -> JoinInfo:
        req = pb.JoinRequest(
            device_name=device_name, credential=credential, client_id=client_id, capabilities=dict(capabilities or {})
        )
        r = self._unary("Join", req, self.config.rpc_timeout_s)
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
        for part in self._stream("DownloadArtifact", req, self.config.stream_timeout_s):
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

    def _long_poll(self, name: str, request: Callable[[int], object], wait_ms: int):
        """A call the coordinator may hold up to wait_ms (at most MAX_POLL_WAIT_MS), plus the rpc timeout."""
        wait_ms = max(0, min(int(wait_ms), MAX_POLL_WAIT_MS))
        return self._unary(name, request(wait_ms), wait_ms / 1000 + self.config.rpc_timeout_s)

    def poll(self, client_id: str, model_id: str, wait_ms: int) -> Task:
        return Task.from_pb(
            self._long_poll(
                "PollTask", lambda w: pb.PollRequest(client_id=client_id, model_id=model_id, wait_ms=w), wait_ms
            )
        )

    def poll_tasks(self, client_ids: list[str], model_id: str, wait_ms: int) -> tuple[int, RoundState, dict[str, Task]]:
        """One PollTasks call: (round, state, {client id: task} for the clients that have work; the rest WAIT).
        A coordinator older than PollTasks answers UNIMPLEMENTED (a FedortError with that code)."""
        r = self._long_poll(
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
        blake3 = bool(expected_blake3) and digests.BLAKE3 in digests.available()
        req = pb.VectorRequest(
            client_id=client_id,
            model_id=model_id,
            round=round,
            cached_sha256=base[0] if base is not None else b"",
            digests=[digests.BLAKE3] if blake3 else [],
        )
        asm: VectorAssembler | None = None
        delta: DeltaDownload | None = None
        for part in self._stream("DownloadVector", req, self.config.stream_timeout_s):
            kind = part_kind(part)
            if kind == "chunk":
                chunk = part if type(part) is memoryview else part.chunk
            if delta is not None and kind == "chunk":
                delta.add(chunk)
            elif asm is None and delta is None:
                if kind != "header":
                    raise ProtocolError(f"vector stream of round {round} must start with a header, got {kind}")
                meta = meta_from_pb(part.header)
                if meta.codec == DOWNLOAD_DELTA:
                    delta = DeltaDownload(meta, base, expected_length, expected_sha256)
                    continue
                _check_named(meta, round, expected_sha256, expected_blake3 if blake3 else None)
                asm = VectorAssembler(meta, expected_length=expected_length, out=self._vectors.take)
            elif kind == "chunk" and asm is not None:
                asm.add(chunk)
            else:
                raise ProtocolError(f"vector stream of round {round} carries a second header")
        if delta is not None:
            return delta.finish(), delta.received
        if asm is None:
            raise ProtocolError(f"vector stream of round {round} was empty")
        return asm.finish(), asm.received_bytes

    def submit_update(self, header: UpdateHeader, vector: np.ndarray | bytes) -> SubmitResult:
        """Stream the header then the chunks of the vector (raw) or of a codec payload (bytes);
        returns once the coordinator answered."""
        chunk = header.vector.chunk_size or CHUNK_BYTES

        def parts() -> Iterator[pb.UpdatePart]:
            yield pb.UpdatePart(header=header.to_pb())
            pieces = (
                iter_payload_chunks(vector, chunk)
                if isinstance(vector, (bytes, bytearray))
                else iter_chunks(vector, chunk)
            )
            for c in pieces:
                yield pb.UpdatePart(chunk=c)

        return SubmitResult.from_pb(self._unary("SubmitUpdate", parts(), self.config.stream_timeout_s))

    # resumable upload (protocol 1.7; edge_client.resumable_upload drives it)
    def begin_upload(self, header: UpdateHeader) -> UploadState:
        req = pb.BeginUploadRequest(header=header.to_pb())
        return UploadState.from_pb(self._unary("BeginUpload", req, self.config.rpc_timeout_s))

    def put_upload_part(self, client_id: str, upload_id: str, offset: int, data: bytes, sha256: bytes) -> UploadState:
        req = pb.UploadPartRequest(client_id=client_id, upload_id=upload_id, offset=offset, data=data, sha256=sha256)
        return UploadState.from_pb(self._unary("PutUploadPart", req, self.config.rpc_timeout_s))

    def get_upload(self, client_id: str, upload_id: str) -> UploadState:
        ref = pb.UploadRef(client_id=client_id, upload_id=upload_id)
        return UploadState.from_pb(self._unary("GetUpload", ref, self.config.rpc_timeout_s))

    def commit_upload(self, client_id: str, upload_id: str) -> SubmitResult:
        ref = pb.UploadRef(client_id=client_id, upload_id=upload_id)
        return SubmitResult.from_pb(self._unary("CommitUpload", ref, self.config.stream_timeout_s))

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
        return SubmitResult.from_pb(self._unary("SubmitEvaluation", req, self.config.rpc_timeout_s))

    def heartbeat(self, client_id: str, timeout_s: float | None = None) -> tuple[int, RoundState]:
        """The coordinator's current round and state."""
        r = self._unary("Heartbeat", pb.HeartbeatRequest(client_id=client_id), timeout_s or self.config.rpc_timeout_s)
        return r.round, RoundState.from_wire(r.state)

    def leave(self, client_id: str, reason: str, timeout_s: float | None = None) -> None:
        self._unary(
            "Leave", pb.LeaveRequest(client_id=client_id, reason=reason), timeout_s or self.config.rpc_timeout_s
        )

    def status(self, client_id: str = "") -> Status:
        """The run's status; `client_id` (metadata `fedort-client-id`) tells a coordinator whose run has
        ended that this device has now learnt the outcome, so it need not keep serving for it."""
        extra = ((OUTCOME_CLIENT_METADATA, client_id),) if client_id else ()
        return Status.from_pb(self._unary("Status", pb.StatusRequest(), self.config.rpc_timeout_s, extra))


def _stub(channel: grpc.Channel) -> pb_grpc.CoordinatorStub:
    """The generated stub, but DownloadVector's chunks arrive as memoryviews of the received message
    (protos.update_part.parse_vector_part): no protobuf parse and no `.chunk` copy per ~1 MiB."""
    stub = pb_grpc.CoordinatorStub(channel)
    stub.DownloadVector = channel.unary_stream(
        "/fedort.v1.Coordinator/DownloadVector",
        request_serializer=pb.VectorRequest.SerializeToString,
        response_deserializer=parse_vector_part,
    )
    return stub


def _check_named(meta, round: int, expected_sha256: bytes | None, expected_blake3: bytes | None) -> None:
    """The header's digest must be the one the Task announced for this vector: its BLAKE3 if the device asked
    for one (`expected_blake3`), else its sha256; ProtocolError otherwise (a header digest nobody asked for too)."""
    if meta.digest == digests.BLAKE3:
        name, expected = "BLAKE3", expected_blake3
        if not expected:
            raise ProtocolError(f"round {round} vector header names a BLAKE3 digest this device did not ask for")
    else:
        name, expected = "sha256", expected_sha256
    if expected and meta.sha256 != expected:
        raise ProtocolError(
            f"round {round} vector header {name} {meta.sha256.hex()[:16]}… differs from the "
            f"task's {expected.hex()[:16]}…"
        )


def _cancelled() -> FedortError:
    exc = FedortError("CANCELLED: the call was cancelled on this side")
    exc.code = "CANCELLED"
    return exc


__all__ = ["ArtifactRef", "ChannelConfig", "JoinInfo", "MAX_POLL_WAIT_MS", "Status", "SubmitResult", "Transport"]
