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
import os
import socket
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

import grpc
import numpy as np

from fedort.protos import fedort_v1_pb2 as pb
from fedort.protos import fedort_v1_pb2_grpc as pb_grpc
from fedort.protos.codec import CHUNK_BYTES, VectorAssembler, iter_chunks
from fedort.edge_client.download_delta import DeltaDownload
from fedort.edge_client.tls_hints import with_tls_hint
from fedort.protos.codecs import iter_payload_chunks
from fedort.protos.codecs.xor_delta import DOWNLOAD_DELTA
from fedort.protos.errors import ConfigError, FedortError, ProtocolError, UnavailableError
from fedort.protos.messages import Metric, Status, SubmitResult, Task, UpdateHeader, meta_from_pb, metrics_to_pb
from fedort.protos.round_state import RoundState
from fedort.protos.status_codes import from_rpc_error

log = logging.getLogger("fedort.edge.transport")

#: grpc's details for a call this side cancelled (any other CANCELLED came from the coordinator).
_LOCAL_CANCEL = "Locally cancelled by application!"

#: Longest hold the coordinator grants a long-poll (protocol semantics 3).
MAX_POLL_WAIT_MS = 30_000


@dataclass(frozen=True)
class ChannelConfig:
    """Where the coordinator is and how calls to it are bounded.

    keepalive: a ping every `keepalive_time_ms` even with no call in flight, and the connection
    is dropped (then re-dialled on the next call) if a ping is not answered within
    `keepalive_timeout_ms`. Coordinators must allow pings this often (grpc servers default to
    one per 5 minutes without data; fedort's coordinator is configured to accept ours).
    """

    address: str
    insecure: bool = False               # plaintext; must be asked for explicitly
    ca_file: str | os.PathLike | None = None     # PEM CA that signed the coordinator's certificate (None: system roots)
    cert_file: str | os.PathLike | None = None   # PEM client certificate chain (mutual TLS)
    key_file: str | os.PathLike | None = None    # PEM client private key (mutual TLS)
    token: str = ""                      # device token sent on every call
    rpc_timeout_s: float = 30.0          # unary calls (Join, Heartbeat, SubmitEvaluation, ...)
    stream_timeout_s: float = 600.0      # artifact/vector downloads and update uploads
    keepalive_time_ms: int = 60_000
    keepalive_timeout_ms: int = 20_000
    max_message_bytes: int = 8 << 20     # > the largest chunk the codec allows (4 MiB - 64 KiB)

    def __post_init__(self) -> None:
        if "://" in self.address or self.address.lower().startswith(("http:", "https:", "grpc:", "dns:")):
            raise ConfigError(f"coordinator address must be HOST:PORT without a scheme, got {self.address!r} "
                              "(drop the 'http://' or 'grpc://' prefix; TLS is chosen by --insecure/--ca-file)")
        host, sep, port = self.address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigError(f"coordinator address must be HOST:PORT with a port in 1..65535, got {self.address!r}")
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("a client certificate needs both cert_file and key_file (--cert and --key)")
        if self.insecure and (self.ca_file or self.cert_file):
            raise ConfigError("insecure (plaintext) excludes ca_file/cert_file/key_file; choose TLS or --insecure")
        for name in ("ca_file", "cert_file", "key_file"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"{name} not found: {path}")
        if any(c in self.token for c in "\r\n"):
            raise ConfigError("token must be one line")

    def check_resolves(self) -> None:
        """ConfigError at once when the coordinator's host name does not resolve (a typo never heals by retrying)."""
        host, _, port = self.address.rpartition(":")
        try:
            socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise ConfigError(f"cannot resolve the coordinator host {host!r} of --coordinator {self.address!r}: "
                              f"{e.strerror or e}") from None

    def credentials(self) -> grpc.ChannelCredentials:
        """TLS credentials from the PEM files (read now, so a bad path fails at connect, not mid-run)."""
        def read(path) -> bytes | None:
            with open(path, "rb") as f:
                return f.read()

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file) if self.ca_file else None,
            private_key=read(self.key_file) if self.key_file else None,
            certificate_chain=read(self.cert_file) if self.cert_file else None,
        )

    def metadata(self) -> tuple[tuple[str, str], ...] | None:
        return (("authorization", f"Bearer {self.token}"),) if self.token else None

    def open_channel(self, *, own_connection: bool = False) -> grpc.Channel:
        """A channel; `own_connection` keeps it off the process-wide subchannel pool (a new TCP connection)."""
        options = self.options() + ([("grpc.use_local_subchannel_pool", 1)] if own_connection else [])
        if self.insecure:
            return grpc.insecure_channel(self.address, options=options)
        return grpc.secure_channel(self.address, self.credentials(), options=options)

    def options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
        ]


@dataclass(frozen=True)
class ArtifactRef:
    """An artifact file as the coordinator announces it."""

    name: str
    sha256: str   # hex
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
    upload_codecs: tuple[str, ...] = ()   # codec specs the run accepts for updates (empty: raw only)
    local_vector_dir: str = ""            # co-located devices may pass vectors as files here (edge_client.local_vectors)
    update_digests: tuple[str, ...] = ()  # update digests accepted besides sha256 (protocol 1.3, protos.digests)


class Transport:
    """Typed calls to the coordinator over one grpc channel (see the module docstring)."""

    def __init__(self, config: ChannelConfig, channel: grpc.Channel | None = None, *,
                 cancellable: bool = True) -> None:
        self.config = config
        self.cancellable = cancellable
        self._channel = channel or config.open_channel()
        self._metadata = config.metadata()
        self._stub = pb_grpc.CoordinatorStub(self._channel)
        self._lock = threading.RLock()  # RLock: cancel_inflight may run in a signal handler
        self._inflight: set = set()
        self._retired: list[grpc.Channel] = []   # channels replaced by _redial
        self._closed = False

    @classmethod
    def connect(cls, address: str, **options) -> "Transport":
        return cls(ChannelConfig(address, **options))

    def close(self) -> None:
        self.cancel_inflight()
        self._closed = True
        for channel in [*self._retired, self._channel]:
            channel.close()

    def __enter__(self) -> "Transport":
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

    def _unary(self, method: Callable, request, timeout: float):
        """Run a unary (or stream-unary) call as a cancellable future and wait for it (blocking if not cancellable)."""
        if not self.cancellable:
            try:
                return method(request, timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as e:
                raise self._error(e) from None
        try:
            future = method.future(request, timeout=timeout, metadata=self._metadata)
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
            return UnavailableError(f"UNAVAILABLE: the coordinator cancelled the call ({details}); "
                                    "it is probably restarting")
        if exc.code == "DEADLINE_EXCEEDED":
            self._redial()
        if exc.code == "UNAVAILABLE" and not self.config.insecure:
            return with_tls_hint(exc, details)
        return exc

    def _redial(self) -> None:
        """A call ran out of time: later calls go over a new connection, since this one may be half-open (a
        coordinator gone without a reset keeps streams hanging); the old channel is closed with the transport."""
        with self._lock:
            if not self._closed:
                self._retired.append(self._channel)
                self._channel = self.config.open_channel(own_connection=True)
                self._stub = pb_grpc.CoordinatorStub(self._channel)

    def _stream(self, method: Callable, request, timeout: float) -> Iterator:
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

    def join(self, device_name: str, client_id: str = "", credential: str = "",
             capabilities: Mapping[str, str] | None = None) -> JoinInfo:
        req = pb.JoinRequest(device_name=device_name, credential=credential, client_id=client_id,
                             capabilities=dict(capabilities or {}))
        r = self._unary(self._stub.Join, req, self.config.rpc_timeout_s)
        return JoinInfo(
            client_id=r.client_id, model_id=r.model_id, manifest_json=r.manifest_json,
            artifacts=tuple(ArtifactRef(a.name, bytes(a.sha256).hex(), a.size) for a in r.artifacts),
            heartbeat_interval_ms=r.heartbeat_interval_ms, max_chunk_bytes=r.max_chunk_bytes,
            upload_codecs=tuple(r.upload_codecs), local_vector_dir=r.local_vector_dir,
            update_digests=tuple(r.update_digests),
        )

    def iter_artifact(self, client_id: str, model_id: str, name: str) -> Iterator[ArtifactRef | bytes]:
        """The artifact's header (an ArtifactRef) followed by its chunks."""
        req = pb.ArtifactRequest(client_id=client_id, model_id=model_id, name=name)
        first = True
        for part in self._stream(self._stub.DownloadArtifact, req, self.config.stream_timeout_s):
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

    def _long_poll(self, method: Callable, request: Callable[[int], object], wait_ms: int):
        """A call the coordinator may hold up to wait_ms (at most MAX_POLL_WAIT_MS), plus the rpc timeout."""
        wait_ms = max(0, min(int(wait_ms), MAX_POLL_WAIT_MS))
        return self._unary(method, request(wait_ms), wait_ms / 1000 + self.config.rpc_timeout_s)

    def poll(self, client_id: str, model_id: str, wait_ms: int) -> Task:
        return Task.from_pb(self._long_poll(self._stub.PollTask, lambda w: pb.PollRequest(
            client_id=client_id, model_id=model_id, wait_ms=w), wait_ms))

    def poll_tasks(self, client_ids: list[str], model_id: str, wait_ms: int) -> tuple[int, RoundState, dict[str, Task]]:
        """One PollTasks call: (round, state, {client id: task} for the clients that have work; the rest WAIT).
        A coordinator older than PollTasks answers UNIMPLEMENTED (a FedortError with that code)."""
        r = self._long_poll(self._stub.PollTasks, lambda w: pb.PollTasksRequest(
            client_ids=list(client_ids), model_id=model_id, wait_ms=w), wait_ms)
        return r.round, RoundState.from_wire(r.state), {t.client_id: Task.from_pb(t.task) for t in r.tasks}

    def secagg_step(self, client_id: str, model_id: str, round: int, step: int, payload: bytes,
                    wait_ms: int) -> tuple[bool, bytes]:
        """One secure-aggregation step (held up to wait_ms until its phase closes): (ready, reply payload)."""
        r = self._long_poll(self._stub.SecAgg, lambda w: pb.SecAggRequest(
            client_id=client_id, model_id=model_id, round=round, step=step, payload=payload, wait_ms=w), wait_ms)
        return r.ready, bytes(r.payload)

    def download_vector(self, client_id: str, model_id: str, round: int, *,
                        expected_length: int | None = None, expected_sha256: bytes | None = None) -> np.ndarray:
        """The global vector of `round`, checked against its header (and what the Task announced)."""
        return self.download_global(client_id, model_id, round, expected_length=expected_length,
                                    expected_sha256=expected_sha256)[0]

    def download_global(self, client_id: str, model_id: str, round: int, *, expected_length: int | None = None,
                        expected_sha256: bytes | None = None,
                        base: tuple[bytes, np.ndarray] | None = None) -> tuple[np.ndarray, int]:
        """(vector, bytes received): like `download_vector`; with `base` (a cached (digest, vector)) the
        coordinator may send the lossless `xor+zstd` delta against it, rebuilt and checked here."""
        req = pb.VectorRequest(client_id=client_id, model_id=model_id, round=round,
                               cached_sha256=base[0] if base is not None else b"")
        asm: VectorAssembler | None = None
        delta: DeltaDownload | None = None
        for part in self._stream(self._stub.DownloadVector, req, self.config.stream_timeout_s):
            kind = part.WhichOneof("part")
            if delta is not None and kind == "chunk":
                delta.add(part.chunk)
            elif asm is None and delta is None:
                if kind != "header":
                    raise ProtocolError(f"vector stream of round {round} must start with a header, got {kind}")
                meta = meta_from_pb(part.header)
                if meta.codec == DOWNLOAD_DELTA:
                    delta = DeltaDownload(meta, base, expected_length, expected_sha256)
                    continue
                if expected_sha256 and meta.sha256 != expected_sha256:
                    raise ProtocolError(
                        f"round {round} vector header sha256 {meta.sha256.hex()[:16]}… differs from the "
                        f"task's {expected_sha256.hex()[:16]}…"
                    )
                asm = VectorAssembler(meta, expected_length=expected_length)
            elif kind == "chunk":
                asm.add(part.chunk)
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
        chunks = iter_payload_chunks if isinstance(vector, (bytes, bytearray)) else iter_chunks

        def parts() -> Iterator[pb.UpdatePart]:
            yield pb.UpdatePart(header=header.to_pb())
            for c in chunks(vector, chunk):
                yield pb.UpdatePart(chunk=c)

        return SubmitResult.from_pb(self._unary(self._stub.SubmitUpdate, parts(), self.config.stream_timeout_s))

    def submit_evaluation(self, client_id: str, model_id: str, round: int, num_examples: int,
                          metrics: Mapping[str, Metric]) -> SubmitResult:
        req = pb.EvaluationResult(client_id=client_id, model_id=model_id, round=round,
                                  num_examples=num_examples, metrics=metrics_to_pb(metrics))
        return SubmitResult.from_pb(self._unary(self._stub.SubmitEvaluation, req, self.config.rpc_timeout_s))

    def heartbeat(self, client_id: str, timeout_s: float | None = None) -> tuple[int, RoundState]:
        """The coordinator's current round and state."""
        r = self._unary(self._stub.Heartbeat, pb.HeartbeatRequest(client_id=client_id),
                        timeout_s or self.config.rpc_timeout_s)
        return r.round, RoundState.from_wire(r.state)

    def leave(self, client_id: str, reason: str, timeout_s: float | None = None) -> None:
        self._unary(self._stub.Leave, pb.LeaveRequest(client_id=client_id, reason=reason),
                    timeout_s or self.config.rpc_timeout_s)

    def status(self) -> Status:
        return Status.from_pb(self._unary(self._stub.Status, pb.StatusRequest(), self.config.rpc_timeout_s))


def _cancelled() -> FedortError:
    exc = FedortError("CANCELLED: the call was cancelled on this side")
    exc.code = "CANCELLED"
    return exc


__all__ = ["ArtifactRef", "ChannelConfig", "JoinInfo", "MAX_POLL_WAIT_MS", "Status", "SubmitResult", "Transport"]
