"""The gRPC face of the coordinator: protobuf in, typed values to the round engine, protobuf out.

An adapter: each handler turns its request (for SubmitUpdate: the stream, as a header dataclass
and an async iterator of chunk bytes) into plain values, makes ONE engine call, and converts
the answer to protobuf.

This is the one place protobuf messages meet the coordinator and the one error boundary:
every `protos.errors` exception an RPC raises becomes `context.abort(code, message)` via
`status_for`; anything unplanned becomes INTERNAL (and is logged with its traceback). The same
boundary authenticates each call (`coordinator.auth`) before the handler runs and checks that
the client id a request names is the caller's own; streams and submissions are bounded per
client (`coordinator.limits`), joins per client and per peer address (`coordinator.join_limits`).
A full disk becomes UNAVAILABLE "coordinator storage full" (`coordinator.storage`), a message is
cut to 1024 characters (it may quote client strings), a wait the caller must keep travels as
`retry-after` trailing metadata, and every failure is counted (`coordinator.monitoring`).
The web port (`coordinator.web_transport`) serves this same object to browsers through a context
adapter; resumable uploads (protocol 1.7) are `coordinator.resumable_uploads`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc

from fedort.common import digests
from fedort.common.errors import FedortError, NotFoundError, ProtocolError, ResourceExhaustedError
from fedort.coordinator.engine.resubmission import submit_counted_once
from fedort.coordinator.engine.round_engine import RoundEngine
from fedort.coordinator.rpc.auth import Authenticator, check_identity
from fedort.coordinator.rpc.device_capabilities import check_capabilities
from fedort.coordinator.rpc.join_limits import JoinGate, clip
from fedort.coordinator.rpc.malformed import reject_malformed
from fedort.coordinator.rpc.monitoring import Monitoring
from fedort.coordinator.state.storage import storage_error
from fedort.coordinator.uploads.admission import accepted_digests, allowed_codecs
from fedort.coordinator.uploads.client_limits import RateLimiter, StreamLimiter
from fedort.coordinator.uploads.metric_limits import check_metrics
from fedort.coordinator.uploads.resumable import ResumableUploads
from fedort.ort.artifacts import ARTIFACT_FILES
from fedort.protos.messages import OUTCOME_CLIENT_METADATA, UpdateHeader, meta_to_pb, metrics_from_pb
from fedort.protos.status_codes import status_for
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc
from fedort.protos.update_codecs.stream import iter_payload_chunks
from fedort.protos.update_codecs.xor_delta import DOWNLOAD_DELTA
from fedort.protos.update_part import chunk_message, part_kind
from fedort.protos.vector_stream import CHUNK_BYTES, VectorMeta, iter_chunk_views

_timeout = getattr(asyncio, "timeout", None)  # Python >= 3.11
UPLOAD_WINDOW_BYTES = 256 << 10  # the per-stream receive window (server.server_options); see _chunks
TOKEN_RECHECK_S = 1.0  # an upload's token is verified again this often: a revoked device's upload stops


def _retrieved(read: asyncio.Future) -> None:
    """A read-ahead whose upload ended first: its outcome is nobody's (no 'exception never retrieved')."""
    if not read.cancelled():
        read.exception()


log = logging.getLogger(__name__)

#: The authenticated client id of the call being served (None with open auth); set by the boundary.
_caller: contextvars.ContextVar[str | None] = contextvars.ContextVar("fedort_caller", default=None)


async def _abort(context: grpc.aio.ServicerContext, method: str, exc: BaseException, monitor: Monitoring) -> None:
    exc = storage_error(exc) or exc  # disk full -> UNAVAILABLE "coordinator storage full" (clients retry)
    monitor.call_failed(method, exc)
    code, message = status_for(exc)
    message = clip(message, 1024)  # client-chosen strings end up in messages: never echo them unbounded
    if (retry_after := getattr(exc, "retry_after_s", None)) is not None:
        context.set_trailing_metadata((("retry-after", f"{retry_after:.3f}"),))
    if isinstance(exc, FedortError):
        log.debug("%s -> %s: %s", method, code.name, message)
    else:
        log.error("%s failed unexpectedly", method, exc_info=exc)
    await context.abort(code, message)


def unary(fn: Callable) -> Callable:
    """Error boundary for unary-response handlers."""

    @functools.wraps(fn)
    async def wrapper(self, request, context):
        try:
            self._authenticate(request, context)
            reject_malformed(request)
            return await fn(self, request, context)
        except Exception as e:
            if isinstance(e, grpc.aio.AbortError):
                raise
            await _abort(context, fn.__name__, e, self.monitor)

    return wrapper


def streaming(fn: Callable) -> Callable:
    """Error boundary for server-streaming handlers (async generators)."""

    @functools.wraps(fn)
    async def wrapper(self, request, context):
        try:
            self._authenticate(request, context)
            reject_malformed(request)
            async for item in fn(self, request, context):
                yield item
        except Exception as e:
            if isinstance(e, grpc.aio.AbortError):
                raise
            await _abort(context, fn.__name__, e, self.monitor)

    return wrapper


MAX_ROUND = (1 << 63) - 1  # rounds are SQLite integers


def is_local_peer(peer: str) -> bool:
    """A gRPC peer string of a caller on this host: loopback or a Unix socket."""
    return peer.startswith(("ipv4:127.", "ipv6:[::1]", "unix:"))


def check_round(round: int) -> None:
    """ProtocolError (INVALID_ARGUMENT) for a round number no run reaches (SQLite stores at most 2**63 - 1)."""
    if not 0 <= round <= MAX_ROUND:
        raise ProtocolError(f"round must be in 0..{MAX_ROUND}, got {round}")


class CoordinatorServicer(pb_grpc.CoordinatorServicer):
    """Implements fedort.v1.Coordinator over a RoundEngine and the coordinator's artifacts copy."""

    def __init__(
        self,
        engine: RoundEngine,
        artifacts_dir: Path,
        chunk_bytes: int = CHUNK_BYTES,
        auth: Authenticator | None = None,
    ) -> None:
        self.engine = engine
        self.monitor: Monitoring = engine.monitor  # RPC errors, bytes out; the engine's uploads feed the rest
        self.auth = auth or Authenticator("open", None)
        self.streams = StreamLimiter(engine.config.access.max_streams_per_client)
        self.submissions = RateLimiter(engine.config.access.submissions_per_minute)
        self.joins = JoinGate(engine.config.access.joins_per_minute, engine.config.access.joins_per_minute_per_address)
        self.resumable = ResumableUploads(
            engine, engine.config.uploads.upload_resume_idle_s, engine.config.uploads.max_chunk_bytes
        )
        self.artifacts_dir = artifacts_dir
        self.chunk_bytes = chunk_bytes
        manifest = engine.manifest
        self._manifest_json = (artifacts_dir / "manifest.json").read_text()
        self._artifacts = {
            name: pb.ArtifactInfo(
                name=name, sha256=bytes.fromhex(manifest.files[name].sha256), size=manifest.files[name].size
            )
            for name in ARTIFACT_FILES
        }

    def _authenticate(self, request, context) -> None:
        """Who calls (UNAUTHENTICATED if unknown); PERMISSION_DENIED if a unary request names another client."""
        is_join = isinstance(request, pb.JoinRequest)
        check_round(getattr(request, "round", 0))
        identity = self.auth.identify(context.invocation_metadata(), request.credential if is_join else "")
        _caller.set(identity)
        client_id = getattr(request, "client_id", None)
        if client_id is not None and not (is_join and not client_id):
            check_identity(identity, client_id)

    @unary
    async def Join(self, request: pb.JoinRequest, context) -> pb.JoinReply:
        self.joins.admit(
            request.device_name, request.capabilities, request.client_id or _caller.get() or "", context.peer()
        )
        check_capabilities(self.engine.config, request.capabilities)
        cid = self.engine.join(
            request.client_id or _caller.get() or "",
            request.device_name,
            dict(request.capabilities),
            enrolled=_caller.get() is not None,
        )
        cfg = self.engine.config
        return pb.JoinReply(
            client_id=cid,
            model_id=self.engine.model_id,
            manifest_json=self._manifest_json,
            artifacts=list(self._artifacts.values()),
            heartbeat_interval_ms=cfg.plan.heartbeat_interval_ms,
            max_chunk_bytes=cfg.uploads.max_chunk_bytes,
            upload_codecs=allowed_codecs(cfg),
            local_vector_dir=str(local.path) if (local := self._local_dir(context)) else "",
            update_digests=accepted_digests(cfg),
            hashes_local_files=local is not None,
        )

    def _local_dir(self, context):
        """The co-located devices' directory, told only to a caller on this host (loopback or a Unix socket):
        a remote device cannot use it, and has no business knowing the coordinator's paths."""
        local = self.engine.local_vectors
        return local if local is not None and is_local_peer(context.peer() or "") else None

    @streaming
    async def DownloadArtifact(self, request: pb.ArtifactRequest, context) -> AsyncIterator[pb.ArtifactPart]:
        self.engine.touch(request.client_id)
        self.engine.check_model(request.model_id)
        info = self._artifacts.get(request.name)
        if info is None:
            raise NotFoundError(f"no artifact named {request.name!r}; expected one of {sorted(self._artifacts)}")
        with self.streams.stream(request.client_id, "download"):
            yield pb.ArtifactPart(header=info)
            with open(self.artifacts_dir / request.name, "rb") as f:
                while block := f.read(self.chunk_bytes):
                    self.monitor.bytes_out(len(block))
                    yield pb.ArtifactPart(chunk=block)

    @unary
    async def PollTask(self, request: pb.PollRequest, context) -> pb.Task:
        task = await self.engine.poll(request.client_id, request.model_id, request.wait_ms)
        return task.to_pb()

    @unary
    async def PollTasks(self, request: pb.PollTasksRequest, context) -> pb.PollTasksReply:
        for cid in request.client_ids:
            check_identity(_caller.get(), cid)
        round, state, tasks = await self.engine.poll_many(list(request.client_ids), request.model_id, request.wait_ms)
        return pb.PollTasksReply(
            round=round,
            state=state.name,
            tasks=[pb.ClientTask(client_id=cid, task=t.to_pb()) for cid, t in tasks.items()],
        )

    @streaming
    async def DownloadVector(self, request: pb.VectorRequest, context) -> AsyncIterator[pb.VectorPart | bytes]:
        g = self.engine.vector_for(request.client_id, request.model_id, request.round)
        n = int(g.vector.shape[0])
        delta = await self.engine.download_deltas.payload(g, bytes(request.cached_sha256))
        chunks: Iterator[bytes | memoryview]
        if delta is None:  # checked with BLAKE3 if the device asks and the Task carried it (protocol 1.6)
            blake3 = bool(g.blake3) and digests.BLAKE3 in request.digests
            meta = VectorMeta(
                self.engine.model_id,
                g.round,
                n,
                g.blake3 if blake3 else g.sha256,
                chunk_size=self.chunk_bytes,
                digest=digests.BLAKE3 if blake3 else "",
            )
            chunks = iter_chunk_views(g.vector, self.chunk_bytes)  # views: chunk_message copies each once
        else:  # lossless delta against the vector the device has (coordinator/rpc/download_delta.py)
            meta = VectorMeta(
                self.engine.model_id,
                g.round,
                n,
                hashlib.sha256(delta).digest(),
                codec=DOWNLOAD_DELTA,
                chunk_size=self.chunk_bytes,
                base_sha256=bytes(request.cached_sha256),
                payload_bytes=len(delta),
            )
            chunks = iter_payload_chunks(delta, self.chunk_bytes)
        with self.streams.stream(request.client_id, "download"):
            yield pb.VectorPart(header=meta_to_pb(meta))
            for chunk in chunks:  # already wire bytes (malformed.SERIALIZERS): one copy of the vector's bytes
                self.monitor.bytes_out(len(chunk))
                yield chunk_message(chunk)

    async def _read(self, context):
        """The next message of an upload stream, or ResourceExhaustedError if the peer went silent.

        A stalled upload would otherwise hold its upload slot (and memory) until the connection
        dies, and a few stalled peers would block every other client's upload.
        """
        limit = self.engine.config.uploads.stream_idle_timeout_s
        try:
            if _timeout is not None:  # 3.11+: a deadline on this task, not a new task per message (wait_for)
                async with _timeout(limit):
                    return await context.read()
            return await asyncio.wait_for(context.read(), limit)
        except asyncio.TimeoutError:
            raise ResourceExhaustedError(
                f"upload stalled: nothing received for {limit:g} s "
                "(stream_idle_timeout_s); the upload was dropped, send it again"
            ) from None

    @unary
    async def SubmitUpdate(self, request_iterator, context) -> pb.SubmitReply:
        first = await self._read(context)
        reject_malformed(first)
        if first is grpc.aio.EOF or part_kind(first) != "header":
            raise ProtocolError(
                "an update stream must start with an UpdateHeader, got "
                + ("an empty stream" if first is grpc.aio.EOF else f"a {part_kind(first)}")
            )
        header = UpdateHeader.from_pb(first.header)
        check_round(header.vector.round)
        check_identity(_caller.get(), header.client_id)
        with self.streams.stream(header.client_id, "upload"):
            self.submissions.take(header.client_id)
            # resent after its round closed: duplicate if counted then (resubmission.py)
            result = await submit_counted_once(self.engine, header, self._chunks(context))
            if result.duplicate and header.local_file and self.engine.local_vectors is not None:
                self.engine.local_vectors.discard(header)  # a handed-over file not taken: ours to delete
            return result.to_pb()

    async def _chunks(self, context) -> AsyncIterator[bytes]:
        """The chunk bytes of an upload stream after its header (ProtocolError for a second header); a plain
        chunk message arrives as a memoryview of its payload (protos.update_part), anything else parsed.

        A chunk larger than the stream's receive window (UPLOAD_WINDOW_BYTES) is handed on only once the
        next message's read is posted: gRPC opens the window for a message it is asked to read, so the
        device sends the next chunk while this one is hashed and spooled instead of stalling after one
        window's worth (benchmarks/bench_upload_stall.py measures the difference).
        At most one message is read ahead."""
        ahead: asyncio.Future | None = None
        loop = asyncio.get_running_loop()
        checked = loop.time()
        try:
            while True:
                part = await (ahead if ahead is not None else self._read(context))
                ahead = None
                if part is grpc.aio.EOF:
                    return
                if not self.auth.open and loop.time() - checked >= TOKEN_RECHECK_S:  # revoked meanwhile?
                    self.auth.identify(context.invocation_metadata())
                    checked = loop.time()
                if type(part) is not memoryview:
                    reject_malformed(part)
                    if part.WhichOneof("part") != "chunk":
                        raise ProtocolError(
                            "an update stream carries one header, then only chunks; got a second header"
                        )
                    part = part.chunk
                if len(part) > UPLOAD_WINDOW_BYTES:
                    ahead = asyncio.ensure_future(self._read(context))
                    ahead.add_done_callback(_retrieved)
                    await asyncio.sleep(0)  # the read-ahead task's first step posts the read
                yield part
        finally:
            if ahead is not None:
                ahead.cancel()

    @unary
    async def BeginUpload(self, request: pb.BeginUploadRequest, context) -> pb.UploadState:
        header = UpdateHeader.from_pb(request.header)
        check_identity(_caller.get(), header.client_id)
        state = await self.resumable.begin(header, new_upload=lambda: self.submissions.take(header.client_id))
        return state.to_pb()

    @unary
    async def PutUploadPart(self, request: pb.UploadPartRequest, context) -> pb.UploadState:
        return (
            await self.resumable.put(
                request.client_id, request.upload_id, request.offset, request.data, bytes(request.sha256)
            )
        ).to_pb()

    @unary
    async def GetUpload(self, request: pb.UploadRef, context) -> pb.UploadState:
        return (await self.resumable.get(request.client_id, request.upload_id)).to_pb()

    @unary
    async def CommitUpload(self, request: pb.UploadRef, context) -> pb.SubmitReply:
        result = await self.resumable.commit(request.client_id, request.upload_id)
        return result.to_pb()

    @unary
    async def SubmitEvaluation(self, request: pb.EvaluationResult, context) -> pb.SubmitReply:
        self.submissions.take(request.client_id)
        check_metrics(request.metrics, "an evaluation")
        return self.engine.submit_evaluation(
            request.client_id, request.model_id, request.round, request.num_examples, metrics_from_pb(request.metrics)
        ).to_pb()

    @unary
    async def Heartbeat(self, request: pb.HeartbeatRequest, context) -> pb.HeartbeatReply:
        round, state = self.engine.heartbeat(request.client_id)
        return pb.HeartbeatReply(round=round, state=state.name)

    @unary
    async def Leave(self, request: pb.LeaveRequest, context) -> pb.LeaveReply:
        self.engine.leave(request.client_id, request.reason)
        return pb.LeaveReply()

    @unary
    async def SecAgg(self, request: pb.SecAggRequest, context) -> pb.SecAggReply:
        ready, payload = await self.engine.secagg_step(
            request.client_id,
            request.model_id,
            request.round,
            int(request.step),
            bytes(request.payload),
            request.wait_ms,
        )
        return pb.SecAggReply(ready=ready, payload=payload)

    @unary
    async def SecAggBatch(self, request: pb.SecAggBatchRequest, context) -> pb.SecAggBatchReply:
        from fedort.coordinator.privacy.secagg.batch import StepCall

        for step in request.steps:
            check_identity(_caller.get(), step.client_id)
        answers = await self.engine.secagg_batch(
            [StepCall(s.client_id, s.model_id, s.round, int(s.step), bytes(s.payload)) for s in request.steps],
            request.wait_ms,
        )
        entries = []
        for a in answers:
            code, message = status_for(a.error) if a.error is not None else (None, "")
            entries.append(
                pb.SecAggBatchEntry(
                    client_id=a.client_id,
                    ready=a.ready,
                    payload=a.payload,
                    error_code=code.name if code else "",
                    error_message=message,
                )
            )
        return pb.SecAggBatchReply(entries=entries)

    @unary
    async def Status(self, request: pb.StatusRequest, context) -> pb.StatusReply:
        status = self.engine.status().to_pb()
        for key, value in context.invocation_metadata() or ():
            if key == OUTCOME_CLIENT_METADATA:
                self.engine.outcome_asked(value)
        return status
