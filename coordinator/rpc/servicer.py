"""The gRPC face of the coordinator: protobuf in, typed values to the round engine, protobuf out.

An adapter: each handler turns its request (for SubmitUpdate: the stream, as a header dataclass
and an async iterator of chunk bytes, read by `rpc.upload_stream`) into plain values, makes ONE
engine call, and converts the answer to protobuf.

This is the one place protobuf messages meet the coordinator. Every handler runs inside the
error boundary (`rpc.error_boundary`: one status code per failure), after `authenticate` has
identified the caller (`rpc.auth`; with mutual TLS, the certificate bound to the token by
`rpc.peer_certificate`) and checked that the client id a request names is the caller's own;
streams and submissions are bounded per client (`uploads.client_limits`), joins per client and per
peer address (`rpc.join_limits`). The web port (`rpc.web_transport`) serves this same object to
browsers through a context adapter; resumable uploads (protocol 1.7) are `uploads.resumable`.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from fedort.common import digests
from fedort.common.errors import NotFoundError
from fedort.coordinator.engine.resubmission import submit_counted_once
from fedort.coordinator.engine.round_engine import RoundEngine
from fedort.coordinator.rpc.auth import Authenticator, check_identity
from fedort.coordinator.rpc.device_capabilities import check_capabilities
from fedort.coordinator.rpc.error_boundary import caller, check_round, streaming, unary
from fedort.coordinator.rpc.join_limits import JoinGate
from fedort.coordinator.rpc.monitoring import Monitoring
from fedort.coordinator.rpc.peer_certificate import PeerCertificate, binds_tokens, check_bound
from fedort.coordinator.rpc.upload_stream import UploadStream
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
from fedort.protos.update_part import chunk_message
from fedort.protos.vector_stream import CHUNK_BYTES, VectorMeta, iter_chunk_views


def is_local_peer(peer: str) -> bool:
    """A gRPC peer string of a caller on this host: loopback or a Unix socket."""
    return peer.startswith(("ipv4:127.", "ipv6:[::1]", "unix:"))


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
        self.upload_stream = UploadStream(engine.config.uploads.stream_idle_timeout_s, self.auth)
        self.binds_certificates = binds_tokens(engine.config) and not self.auth.open
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

    def authenticate(self, request, context) -> None:
        """Who calls (UNAUTHENTICATED if unknown, or if a mutual-TLS certificate names another client than the
        token); PERMISSION_DENIED if a unary request names another client."""
        is_join = isinstance(request, pb.JoinRequest)
        check_round(getattr(request, "round", 0))
        identity = self.auth.identify(context.invocation_metadata(), request.credential if is_join else "")
        if self.binds_certificates and identity is not None:
            check_bound(PeerCertificate.of(context.auth_context()), identity)
        caller.set(identity)
        client_id = getattr(request, "client_id", None)
        if client_id is not None and not (is_join and not client_id):
            check_identity(identity, client_id)

    @unary
    async def Join(self, request: pb.JoinRequest, context) -> pb.JoinReply:
        self.joins.admit(
            request.device_name, request.capabilities, request.client_id or caller.get() or "", context.peer()
        )
        check_capabilities(self.engine.config, request.capabilities)
        cid = self.engine.join(
            request.client_id or caller.get() or "",
            request.device_name,
            dict(request.capabilities),
            enrolled=caller.get() is not None,
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
            check_identity(caller.get(), cid)
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

    @unary
    async def SubmitUpdate(self, request_iterator, context) -> pb.SubmitReply:
        header = await self.upload_stream.header(context)
        check_round(header.vector.round)
        check_identity(caller.get(), header.client_id)
        with self.streams.stream(header.client_id, "upload"):
            self.submissions.take(header.client_id)
            # resent after its round closed: duplicate if counted then (resubmission.py)
            result = await submit_counted_once(self.engine, header, self.upload_stream.chunks(context))
            if result.duplicate and header.local_file and self.engine.local_vectors is not None:
                self.engine.local_vectors.discard(header)  # a handed-over file not taken: ours to delete
            return result.to_pb()

    @unary
    async def BeginUpload(self, request: pb.BeginUploadRequest, context) -> pb.UploadState:
        header = UpdateHeader.from_pb(request.header)
        check_identity(caller.get(), header.client_id)
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
            check_identity(caller.get(), step.client_id)
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
