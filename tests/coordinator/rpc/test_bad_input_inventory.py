"""Every RPC against a client built from the .proto alone: each bad input gets its status code, says what
was expected, and leaves the state dir as it was.

One token-auth coordinator serves the whole module: alice, bob, carol and dave are enrolled and
joined (all but carol announcing 100 examples), round 1 is open with all four selected, and dave
holds an open resumable upload for the upload-part cases. Requests go out through raw
multicallables as serialized bytes, so a case may also send what no stub would (wrong wire types,
bad UTF-8). The parametrize ids are the inventory: `<RPC>: <what is wrong>`.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio

from chaos_support import state_snapshot
from coordinator_fixtures import P_MLP, RPC_TIMEOUT, make_config, mlp_artifacts  # noqa: F401
from fedort.common import digests
from fedort.coordinator import Coordinator
from fedort.coordinator.rpc.devices import DeviceStore
from fedort.protos.stubs import fedort_v1_pb2 as pb

pytestmark = pytest.mark.asyncio(loop_scope="module")

SERVICE = "/fedort.v1.Coordinator/"
CHUNK = 16384
MAX_EXAMPLES = 1000
CLIENTS = ("alice", "bob", "carol", "dave")
U64 = (1 << 64) - 1
INVALID, PRECONDITION, NOT_FOUND, EXHAUSTED, UNAUTHENTICATED, DENIED = (
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
STREAMING_REPLIES = {"DownloadArtifact", "DownloadVector"}
WRONG_MODEL = r"request names model f{16}…, this run trains model [0-9a-f]{16}…"
SHA_MISMATCH = r"vector sha256 mismatch: header says [0-9a-f]{16}…, received bytes hash to [0-9a-f]{16}…"
ANNOUNCED = r"num_examples must be in 1\.\.100 \(the examples the device announced at Join\), "
UNKNOWN_UPLOAD = r"no open upload 'nope': it expired \(idle \d+ s\), was refused, or the coordinator restarted"


@dataclass
class Target:
    coord: Coordinator
    channel: grpc.aio.Channel
    tokens: dict[str, str]
    model: str
    vector: np.ndarray      # round 1's global vector
    trained_from: bytes     # its sha256, as the FIT task announced it
    upload_id: str = ""     # dave's open resumable upload (`open_upload`)

    def metadata(self, who: str | None) -> tuple[tuple[str, str], ...]:
        return () if who is None else (("authorization", f"Bearer {self.tokens[who]}"),)

    async def unary(self, method: str, request: bytes, who: str | None = "alice", metadata=None) -> bytes:
        call = self.channel.unary_unary(SERVICE + method, request_serializer=None, response_deserializer=None)
        return await call(request, metadata=metadata or self.metadata(who), timeout=RPC_TIMEOUT)

    async def server_stream(self, method: str, request: bytes, who: str | None = "alice", metadata=None) -> list:
        call = self.channel.unary_stream(SERVICE + method, request_serializer=None, response_deserializer=None)
        return [part async for part in call(request, metadata=metadata or self.metadata(who), timeout=RPC_TIMEOUT)]

    async def upload(self, parts: list[bytes], who: str | None = "alice", metadata=None) -> bytes:
        call = self.channel.stream_unary(SERVICE + "SubmitUpdate", request_serializer=None,
                                         response_deserializer=None)
        for attempt in range(3):
            try:
                return await call(iter(parts), metadata=metadata or self.metadata(who), timeout=RPC_TIMEOUT)
            except grpc.aio.AioRpcError as e:
                # grpc-aio race (coordinator_fixtures.StubClient.submit_parts): a send failing after the server's
                # refusal may end the call INTERNAL "from Core" instead; sent again, the server's status arrives
                if e.code() != grpc.StatusCode.INTERNAL or "from Core" not in (e.details() or "") or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def download(self, who: str, round: int) -> np.ndarray:
        parts = await self.server_stream("DownloadVector", pb.VectorRequest(
            client_id=who, model_id=self.model, round=round).SerializeToString(), who)
        return np.frombuffer(b"".join(pb.VectorPart.FromString(p).chunk for p in parts[1:]), "<f4").copy()

    async def send(self, method: str, request, who: str | None = "alice", metadata=None):
        """`request` (a message, or bytes as they are) to `method`."""
        if method == "SubmitUpdate":
            return await self.upload(request, who, metadata)
        raw = request if isinstance(request, bytes) else request.SerializeToString()
        if method in STREAMING_REPLIES:
            return await self.server_stream(method, raw, who, metadata)
        return await self.unary(method, raw, who, metadata)


async def open_upload(t: Target) -> None:
    """Dave's resumable upload of an honest update, opened once (Begin again: the same upload)."""
    state = pb.UploadState.FromString(await t.unary("BeginUpload", pb.BeginUploadRequest(
        header=header(t, client_id="dave")).SerializeToString(), "dave"))
    assert state.offset == 0 and state.payload_bytes == 4 * P_MLP
    t.upload_id = state.upload_id


@contextlib.asynccontextmanager
async def serving(state_dir: Path, artifacts: Path, announced: dict[str, dict[str, str]],
                  **config) -> AsyncIterator[Target]:
    """A token-auth coordinator on 127.0.0.1:0 with the clients of `announced` enrolled and joined (each with
    those Join capabilities), alice holding round 1's FIT task and global vector; stopped on exit."""
    store = DeviceStore(state_dir)
    tokens = {cid: store.enroll(cid)[1] for cid in announced}
    values = dict(auth="token", round_timeout_s=600, max_chunk_bytes=CHUNK, joins_per_minute=0,
                  max_streams_per_client=0)
    coord = Coordinator(make_config(artifacts, state_dir, **{**values, **config}))
    await coord.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{coord.port}",
                                        options=[("grpc.max_send_message_length", 64 << 20)])
    t = Target(coord, channel, tokens, "", np.zeros(0, np.float32), b"")
    try:
        for cid, capabilities in announced.items():
            reply = pb.JoinReply.FromString(await t.unary("Join", pb.JoinRequest(
                device_name=cid, capabilities=capabilities).SerializeToString(), cid))
        t.model = reply.model_id
        task = pb.Task.FromString(await t.unary("PollTask", pb.PollRequest(
            client_id="alice", model_id=t.model, wait_ms=10_000).SerializeToString()))
        assert task.kind == pb.Task.FIT and task.round == 1
        t.trained_from = task.vector_sha256
        t.vector = await t.download("alice", 1)
        assert hashlib.sha256(t.vector.tobytes()).digest() == t.trained_from
        yield t
    finally:
        await channel.close()
        await coord.stop(grace=0)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def target(tmp_path_factory, mlp_artifacts):  # noqa: F811
    """Carol announces no data set size, so max_examples caps her updates."""
    announced = {cid: {} if cid == "carol" else {"examples": "100"} for cid in CLIENTS}
    async with serving(tmp_path_factory.mktemp("inventory") / "state", mlp_artifacts, announced, rounds=2,
                       min_clients=2, min_available_clients=4, max_examples=MAX_EXAMPLES) as t:
        yield t


# ---- requests ------------------------------------------------------------------------------

def header(t: Target, vector: np.ndarray | None = None, *, client_id: str = "alice", num_examples: int = 10,
           metrics: dict[str, pb.Metric] | None = None, local_file: str = "", trained_from: bytes | None = None,
           **fields) -> pb.UpdateHeader:
    """An honest raw update header of alice for round 1, with `fields` of its VectorHeader replaced."""
    v = t.vector if vector is None else vector
    values = dict(model_id=t.model, round=1, length=P_MLP, dtype="float32", codec="raw",
                  sha256=hashlib.sha256(v.astype("<f4").tobytes()).digest(), chunk_size=CHUNK)
    values.update(fields)
    return pb.UpdateHeader(client_id=client_id, vector=pb.VectorHeader(**values), num_examples=num_examples,
                           metrics=metrics or {}, trained_from_sha256=t.trained_from if trained_from is None
                           else trained_from, local_file=local_file)


def chunks(payload: bytes, size: int = CHUNK) -> list[bytes]:
    return [pb.UpdatePart(chunk=payload[i:i + size]).SerializeToString() for i in range(0, len(payload), size)]


def stream(t: Target, vector: np.ndarray | None = None, *, chunk_size: int = CHUNK, payload: bytes | None = None,
           **header_fields) -> list[bytes]:
    v = t.vector if vector is None else vector
    body = v.astype("<f4").tobytes() if payload is None else payload
    return [pb.UpdatePart(header=header(t, v, **header_fields)).SerializeToString(), *chunks(body, chunk_size)]


def part(t: Target, *, client_id: str = "dave", offset: int = 0, data: bytes | None = None,
         sha256: bytes | None = None) -> pb.UploadPartRequest:
    """A part of dave's open upload: its first 4 payload bytes at offset 0 unless told otherwise."""
    data = t.vector.astype("<f4").tobytes()[:4] if data is None else data
    return pb.UploadPartRequest(client_id=client_id, upload_id=t.upload_id, offset=offset, data=data,
                                sha256=hashlib.sha256(data).digest() if sha256 is None else sha256)


def with_nan(t: Target) -> np.ndarray:
    v = t.vector.copy()
    v[17] = np.nan
    return v


def metrics(n: int, name: str = "m") -> dict[str, pb.Metric]:
    return {f"{name}{i}": pb.Metric(value=1.0) for i in range(n)}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def varint_field(number: int, value: int) -> bytes:
    """Field `number` encoded as a varint, whatever type the .proto gives it."""
    return _varint(number << 3) + _varint(value)


def bytes_field(number: int, value: bytes) -> bytes:
    """Field `number` encoded as length-delimited bytes, whatever type the .proto gives it."""
    return _varint(number << 3 | 2) + _varint(len(value)) + value


@dataclass(frozen=True)
class Case:
    method: str
    request: Callable[[Target], object]      # the message (or bytes, or a SubmitUpdate stream's parts)
    code: grpc.StatusCode
    says: str                                # a regular expression the status message matches
    who: str | None = "alice"                # whose token the call carries (None: no token)
    metadata: tuple = ()                     # instead of the token, when set
    upload: bool = False                     # needs dave's open resumable upload (`open_upload`)


def _cases() -> dict[str, Case]:
    other = "f" * 64
    return {
        # ---- authentication, on any method ----
        "Heartbeat: no token": Case("Heartbeat", lambda t: pb.HeartbeatRequest(client_id="alice"), UNAUTHENTICATED,
                                    r"requires a device token", who=None),
        "Heartbeat: Basic scheme": Case("Heartbeat", lambda t: pb.HeartbeatRequest(client_id="alice"),
                                        UNAUTHENTICATED, r"must be 'Bearer <device token>'",
                                        metadata=(("authorization", "Basic YWxpY2U6eA=="),)),
        "Heartbeat: malformed token": Case("Heartbeat", lambda t: pb.HeartbeatRequest(client_id="alice"),
                                           UNAUTHENTICATED, r"malformed device token; expected 'fedort_<client_id>_",
                                           metadata=(("authorization", "Bearer fedort_alice_nothex"),)),
        "Heartbeat: token never issued": Case("Heartbeat", lambda t: pb.HeartbeatRequest(client_id="mallory"),
                                              UNAUTHENTICATED, r"device token for mallory is not valid here",
                                              metadata=(("authorization", "Bearer fedort_mallory_" + "0" * 64),)),
        "Join: credential field garbage": Case("Join", lambda t: pb.JoinRequest(credential="let me in"),
                                               UNAUTHENTICATED, r"malformed device token", who=None),
        # ---- Join ----
        "Join: another client's id": Case("Join", lambda t: pb.JoinRequest(client_id="bob"), DENIED,
                                          r"authenticated as alice, but the request names client bob"),
        "Join: device_name 129 bytes": Case("Join", lambda t: pb.JoinRequest(device_name="x" * 129), INVALID,
                                            r"device_name must be at most 128 bytes, got 129"),
        "Join: 65 capabilities": Case("Join", lambda t: pb.JoinRequest(capabilities={f"k{i}": "v" for i in range(65)}),
                                      INVALID, r"at most 64 capabilities per Join, got 65"),
        "Join: capability name 65 bytes": Case("Join", lambda t: pb.JoinRequest(capabilities={"k" * 65: "v"}),
                                               INVALID, r"capability names must be at most 64 bytes, got 65"),
        "Join: capability value 257 bytes": Case("Join", lambda t: pb.JoinRequest(capabilities={"k": "v" * 257}),
                                                 INVALID, r"capability values must be at most 256 bytes, got 257"),
        "Join: capabilities 4 KiB in all": Case("Join", lambda t: pb.JoinRequest(
            capabilities={f"k{i:02d}": "v" * 200 for i in range(21)}), INVALID,
            r"capabilities must total at most 4096 bytes"),
        "Join: device_name not UTF-8": Case("Join", lambda t: bytes_field(1, b"\xff\xfe"), INVALID,
                                            r"not a valid protobuf message"),
        "Join: message over 256 KiB": Case("Join", lambda t: pb.JoinRequest(device_name="x" * (300 << 10)), INVALID,
                                           r"Join requests must be at most 262144 bytes, got \d+ \(unparsed\)"),
        # ---- DownloadArtifact ----
        "DownloadArtifact: unknown name": Case("DownloadArtifact", lambda t: pb.ArtifactRequest(
            client_id="alice", model_id=t.model, name="secrets.txt"), NOT_FOUND, r"no artifact named 'secrets.txt'; "
            r"expected one of \["),
        "DownloadArtifact: path outside the artifacts": Case("DownloadArtifact", lambda t: pb.ArtifactRequest(
            client_id="alice", model_id=t.model, name="../state.db"), NOT_FOUND, r"no artifact named '\.\./state\.db'"),
        "DownloadArtifact: wrong model id": Case("DownloadArtifact", lambda t: pb.ArtifactRequest(
            client_id="alice", model_id=other, name="checkpoint"), PRECONDITION, WRONG_MODEL),
        "DownloadArtifact: another client's id": Case("DownloadArtifact", lambda t: pb.ArtifactRequest(
            client_id="bob", model_id=t.model, name="checkpoint"), DENIED, r"authenticated as alice"),
        # ---- PollTask / PollTasks ----
        "PollTask: wrong model id": Case("PollTask", lambda t: pb.PollRequest(client_id="alice", model_id=other),
                                         PRECONDITION, WRONG_MODEL),
        "PollTask: empty model id": Case("PollTask", lambda t: pb.PollRequest(client_id="alice"), PRECONDITION,
                                         r"request names model \(none\), this run trains model [0-9a-f]{16}…"),
        "PollTask: no client id": Case("PollTask", lambda t: pb.PollRequest(model_id=t.model), DENIED,
                                       r"names client \(none\)"),
        "PollTask: another client's id": Case("PollTask", lambda t: pb.PollRequest(client_id="bob", model_id=t.model),
                                              DENIED, r"authenticated as alice, but the request names client bob"),
        "PollTask: client_id sent as a varint": Case("PollTask", lambda t: varint_field(1, 7) + bytes_field(
            2, t.model.encode()), DENIED, r"names client \(none\)"),
        "PollTasks: another client among the ids": Case("PollTasks", lambda t: pb.PollTasksRequest(
            client_ids=["alice", "bob"], model_id=t.model), DENIED, r"names client bob"),
        "PollTasks: wrong model id": Case("PollTasks", lambda t: pb.PollTasksRequest(
            client_ids=["alice"], model_id=other), PRECONDITION, WRONG_MODEL),
        # ---- DownloadVector ----
        "DownloadVector: round 2**64-1": Case("DownloadVector", lambda t: pb.VectorRequest(
            client_id="alice", model_id=t.model, round=U64), INVALID, rf"round must be in 0\.\.{(1 << 63) - 1}, got {U64}"),
        "DownloadVector: round 2**63": Case("DownloadVector", lambda t: pb.VectorRequest(
            client_id="alice", model_id=t.model, round=1 << 63), INVALID, r"round must be in 0\.\."),
        "DownloadVector: future round": Case("DownloadVector", lambda t: pb.VectorRequest(
            client_id="alice", model_id=t.model, round=5), NOT_FOUND,
            r"no global vector for round 5 yet; the latest round is 1"),
        "DownloadVector: round 0": Case("DownloadVector", lambda t: pb.VectorRequest(
            client_id="alice", model_id=t.model, round=0), NOT_FOUND, r"no global vector for round 0"),
        "DownloadVector: round sent as bytes": Case("DownloadVector", lambda t: bytes_field(1, b"alice") + bytes_field(
            2, t.model.encode()) + bytes_field(3, b"\1"), NOT_FOUND, r"no global vector for round 0"),
        "DownloadVector: wrong model id": Case("DownloadVector", lambda t: pb.VectorRequest(
            client_id="alice", model_id=other, round=1), PRECONDITION, WRONG_MODEL),
        "DownloadVector: another client's id": Case("DownloadVector", lambda t: pb.VectorRequest(
            client_id="bob", model_id=t.model, round=1), DENIED, r"names client bob"),
        # ---- SubmitUpdate: the stream ----
        "SubmitUpdate: empty stream": Case("SubmitUpdate", lambda t: [], INVALID,
                                           r"must start with an UpdateHeader, got an empty stream"),
        "SubmitUpdate: chunk before the header": Case("SubmitUpdate", lambda t: stream(t)[1:], INVALID,
                                                      r"must start with an UpdateHeader, got a chunk"),
        "SubmitUpdate: second header": Case("SubmitUpdate", lambda t: stream(t)[:2] + stream(t), INVALID,
                                            r"carries one header, then only chunks; got a second header"),
        "SubmitUpdate: garbage after the header": Case("SubmitUpdate", lambda t: stream(t)[:1] + [b"\xff\xff"],
                                                       INVALID, r"not a valid protobuf message"),
        "SubmitUpdate: truncated stream": Case("SubmitUpdate", lambda t: stream(t)[:-1], INVALID,
                                               rf"after \d+ of {4 * P_MLP} bytes"),
        "SubmitUpdate: header only": Case("SubmitUpdate", lambda t: stream(t)[:1], INVALID,
                                          rf"after 0 of {4 * P_MLP} bytes"),
        "SubmitUpdate: bytes past the end": Case("SubmitUpdate", lambda t: stream(t) + chunks(b"\0\0\0\0"), INVALID,
                                                 rf"raw update of alice carries more than the {4 * P_MLP} bytes its "
                                                 r"header declares"),
        "SubmitUpdate: empty chunk": Case("SubmitUpdate", lambda t: stream(t)[:1] + chunks(b"") +
                                          [pb.UpdatePart(chunk=b"").SerializeToString()] + stream(t)[1:], INVALID,
                                          r"empty chunk in vector stream"),
        "SubmitUpdate: chunk over max_chunk_bytes": Case("SubmitUpdate", lambda t: stream(t, chunk_size=CHUNK + 4),
                                                         EXHAUSTED, rf"chunk of {CHUNK + 4} bytes exceeds the limit of "
                                                         rf"{CHUNK}"),
        "SubmitUpdate: one message over the transport limit": Case("SubmitUpdate", lambda t: stream(t)[:1] + [
            pb.UpdatePart(chunk=b"\0" * (9 << 20)).SerializeToString()], EXHAUSTED, r"Received message larger than max \(\d+ vs\. \d+\)"),
        "SubmitUpdate: chunks out of order": Case("SubmitUpdate", lambda t: [stream(t)[0], *reversed(stream(t)[1:])],
                                                  INVALID, SHA_MISMATCH),
        # ---- SubmitUpdate: the header ----
        "SubmitUpdate: no client id": Case("SubmitUpdate", lambda t: stream(t, client_id=""), DENIED,
                                           r"names client \(none\)"),
        "SubmitUpdate: payload_bytes of another size": Case("SubmitUpdate", lambda t: stream(t, payload_bytes=8),
                                                            INVALID, r"raw payload for 9610 values must be 38440 bytes, header says 8"),
        "SubmitUpdate: a raw update as a delta": Case("SubmitUpdate", lambda t: stream(t, base_sha256=t.trained_from),
                                                      INVALID, r"codec raw carries the update itself; base_sha256 must be empty"),
        "SubmitUpdate: another client's id": Case("SubmitUpdate", lambda t: stream(t, client_id="bob"), DENIED,
                                                  r"authenticated as alice, but the request names client bob"),
        "SubmitUpdate: round 2**64-1": Case("SubmitUpdate", lambda t: stream(t, round=U64), INVALID,
                                            rf"round must be in 0\.\.{(1 << 63) - 1}, got {U64}"),
        "SubmitUpdate: round 0": Case("SubmitUpdate", lambda t: stream(t, round=0), PRECONDITION,
                                      r"round 0 is not open for updates; the open round is 1"),
        "SubmitUpdate: next round": Case("SubmitUpdate", lambda t: stream(t, round=2), PRECONDITION,
                                         r"round 2 is not open for updates; the open round is 1"),
        "SubmitUpdate: wrong model id": Case("SubmitUpdate", lambda t: stream(t, model_id=other), PRECONDITION, WRONG_MODEL),
        "SubmitUpdate: length one short": Case("SubmitUpdate", lambda t: stream(t, length=P_MLP - 1), INVALID,
                                               rf"must have {P_MLP} elements for this model, header says {P_MLP - 1}"),
        "SubmitUpdate: length 0": Case("SubmitUpdate", lambda t: stream(t, length=0), INVALID,
                                       rf"must have {P_MLP} elements"),
        "SubmitUpdate: length 2**64-1": Case("SubmitUpdate", lambda t: stream(t, length=U64), INVALID,
                                             rf"must have {P_MLP} elements for this model, header says {U64}"),
        "SubmitUpdate: dtype float64": Case("SubmitUpdate", lambda t: stream(t, dtype="float64"), INVALID,
                                            r"vector dtype must be one of \['float32'\], got 'float64'"),
        "SubmitUpdate: 0 examples": Case("SubmitUpdate", lambda t: stream(t, num_examples=0), INVALID,
                                         ANNOUNCED + "got 0"),
        "SubmitUpdate: examples over max_examples": Case("SubmitUpdate", lambda t: stream(
            t, client_id="carol", num_examples=MAX_EXAMPLES + 1), INVALID,
            rf"num_examples must be in 1\.\.{MAX_EXAMPLES} \(max_examples\), got {MAX_EXAMPLES + 1}", "carol"),
        "SubmitUpdate: examples 2**64-1": Case("SubmitUpdate", lambda t: stream(t, num_examples=U64), INVALID,
                                               ANNOUNCED + f"got {U64}"),
        "SubmitUpdate: examples over what Join announced": Case("SubmitUpdate", lambda t: stream(
            t, num_examples=101), INVALID, ANNOUNCED + "got 101"),
        "SubmitUpdate: sha256 of other bytes": Case("SubmitUpdate", lambda t: stream(
            t, sha256=hashlib.sha256(b"other").digest()), INVALID, SHA_MISMATCH),
        "SubmitUpdate: sha256 of 8 bytes": Case("SubmitUpdate", lambda t: stream(t, sha256=b"\1" * 8), INVALID,
                                                r"header sha256 must be 32 bytes, got 8"),
        "SubmitUpdate: unknown digest name": Case("SubmitUpdate", lambda t: stream(t, digest="md5"), INVALID,
                                                  r"unknown vector digest 'md5'; known: \['sha256', 'blake3'\]"),
        "SubmitUpdate: blake3 of other bytes": Case("SubmitUpdate", lambda t: stream(
            t, digest="blake3", sha256=digests.digest("blake3", b"other")), INVALID,
            r"vector blake3 mismatch: header says [0-9a-f]{16}…, received bytes hash to [0-9a-f]{16}…"),
        "SubmitUpdate: vector header missing": Case("SubmitUpdate", lambda t: [pb.UpdatePart(header=pb.UpdateHeader(
            client_id="alice", num_examples=10)).SerializeToString(), *stream(t)[1:]], PRECONDITION,
            r"request names model \(none\), this run trains model [0-9a-f]{16}…"),
        "SubmitUpdate: NaN value": Case("SubmitUpdate", lambda t: stream(t, with_nan(t)), INVALID,
                                     r"raw payload contains a non-finite value \(nan\) at position 17"),
        "SubmitUpdate: trained from another vector": Case("SubmitUpdate", lambda t: stream(
            t, trained_from=b"\7" * 32), PRECONDITION, r"update was trained from global vector 0707070707070707…, "
            r"but round 1 trains from [0-9a-f]{16}…: stale work"),
        "SubmitUpdate: local_file without a local vector dir": Case("SubmitUpdate", lambda t: stream(
            t, local_file="alice.1234.f32")[:1], INVALID, r"this coordinator takes no local vector files \(it runs without "
            r"local_vector_dir"),
        "SubmitUpdate: 33 metrics": Case("SubmitUpdate", lambda t: stream(t, metrics=metrics(33)), INVALID,
                                         r"at most 32 metrics, got 33"),
        "SubmitUpdate: metric name 65 bytes": Case("SubmitUpdate", lambda t: stream(t, metrics={"n" * 65: pb.Metric()}),
                                                   INVALID, r"metric names must be 1\.\.64 bytes, got one of 65"),
        "SubmitUpdate: unknown codec": Case("SubmitUpdate", lambda t: stream(t, codec="gzip"), INVALID,
                                            r"update codec must be one of \[.*'raw'.*\], got 'gzip'"),
        # ---- SubmitEvaluation, Heartbeat, Leave, Status ----
        "SubmitEvaluation: outside an evaluation": Case("SubmitEvaluation", lambda t: pb.EvaluationResult(
            client_id="alice", model_id=t.model, round=1, num_examples=5), PRECONDITION,
            r"round 1 is not open for evaluation; no evaluation is open \(state TRAINING\)"),
        "SubmitEvaluation: another client's id": Case("SubmitEvaluation", lambda t: pb.EvaluationResult(
            client_id="bob", model_id=t.model, round=1, num_examples=5), DENIED, r"names client bob"),
        "SubmitEvaluation: round 2**64-1": Case("SubmitEvaluation", lambda t: pb.EvaluationResult(
            client_id="alice", model_id=t.model, round=U64, num_examples=5), INVALID, r"round must be in 0\.\."),
        "SubmitEvaluation: 33 metrics": Case("SubmitEvaluation", lambda t: pb.EvaluationResult(
            client_id="alice", model_id=t.model, round=1, num_examples=5, metrics=metrics(33)), INVALID,
            r"an evaluation may carry at most 32 metrics, got 33"),
        "Heartbeat: another client's id": Case("Heartbeat", lambda t: pb.HeartbeatRequest(client_id="bob"), DENIED,
                                               r"names client bob"),
        "Leave: another client's id": Case("Leave", lambda t: pb.LeaveRequest(client_id="bob"), DENIED,
                                           r"names client bob"),
        "Leave: reason over 256 KiB": Case("Leave", lambda t: pb.LeaveRequest(client_id="alice", reason="r" * (300 << 10)),
                                           INVALID, r"Leave requests must be at most 262144 bytes"),
        "Status: garbage bytes": Case("Status", lambda t: b"\xff\xff\xff", INVALID, r"not a valid protobuf message"),
        # ---- secure aggregation, in a run without it ----
        "SecAgg: a run without secure aggregation": Case("SecAgg", lambda t: pb.SecAggRequest(
            client_id="alice", model_id=t.model, round=1, step=1), PRECONDITION, r"does not use secure aggregation"),
        "SecAgg: another client's id": Case("SecAgg", lambda t: pb.SecAggRequest(
            client_id="bob", model_id=t.model, round=1, step=1), DENIED, r"names client bob"),
        "SecAgg: round 2**64-1": Case("SecAgg", lambda t: pb.SecAggRequest(
            client_id="alice", model_id=t.model, round=U64, step=1), INVALID, r"round must be in 0\.\."),
        "SecAggBatch: another client's step": Case("SecAggBatch", lambda t: pb.SecAggBatchRequest(steps=[
            pb.SecAggRequest(client_id="bob", model_id=t.model, round=1, step=1)]), DENIED, r"names client bob"),
        "SecAggBatch: over 10000 steps": Case("SecAggBatch", lambda t: pb.SecAggBatchRequest(steps=[
            pb.SecAggRequest(client_id="alice", model_id=t.model, round=1, step=1)] * 10_001), INVALID,
            r"SecAggBatch carries 10001 steps; at most 10000 per call"),
        # ---- resumable uploads ----
        "BeginUpload: another client's id": Case("BeginUpload", lambda t: pb.BeginUploadRequest(
            header=header(t, client_id="bob")), DENIED, r"names client bob"),
        "BeginUpload: with a local_file": Case("BeginUpload", lambda t: pb.BeginUploadRequest(
            header=header(t, local_file="alice.1.f32")), INVALID, r"local_file must be empty"),
        "BeginUpload: next round": Case("BeginUpload", lambda t: pb.BeginUploadRequest(header=header(t, round=2)),
                                        PRECONDITION, r"round 2 is not open for updates"),
        "PutUploadPart: unknown upload id": Case("PutUploadPart", lambda t: pb.UploadPartRequest(
            client_id="alice", upload_id="nope", offset=0, data=b"x", sha256=hashlib.sha256(b"x").digest()),
            NOT_FOUND, UNKNOWN_UPLOAD),
        "GetUpload: unknown upload id": Case("GetUpload", lambda t: pb.UploadRef(client_id="alice", upload_id="nope"),
                                             NOT_FOUND, UNKNOWN_UPLOAD),
        "CommitUpload: unknown upload id": Case("CommitUpload", lambda t: pb.UploadRef(
            client_id="alice", upload_id="nope"), NOT_FOUND, UNKNOWN_UPLOAD),
        "CommitUpload: another client's id": Case("CommitUpload", lambda t: pb.UploadRef(
            client_id="bob", upload_id="nope"), DENIED, r"names client bob"),
        "PutUploadPart: offset ahead of the acknowledged bytes": Case("PutUploadPart", lambda t: part(t, offset=16),
                                                                      PRECONDITION, r"expects its next part at offset "
                                                                      r"0, got offset 16; call GetUpload", "dave",
                                                                      upload=True),
        "PutUploadPart: sha256 of other bytes": Case("PutUploadPart", lambda t: part(
            t, sha256=hashlib.sha256(b"other").digest()), INVALID, r"its sha256 does not match its 4 bytes", "dave",
            upload=True),
        "PutUploadPart: sha256 of 31 bytes": Case("PutUploadPart", lambda t: part(t, sha256=b"\0" * 31), INVALID,
                                                  r"expected the 32-byte sha256 of `data`", "dave", upload=True),
        "PutUploadPart: no data": Case("PutUploadPart", lambda t: part(t, data=b""), INVALID,
                                       r"must carry 1 or more bytes, got none", "dave", upload=True),
        "PutUploadPart: part over max_part_bytes": Case("PutUploadPart", lambda t: part(t, data=b"\0" * (CHUNK + 1)),
                                                        INVALID, rf"upload part of {CHUNK + 1} bytes exceeds "
                                                        rf"max_part_bytes {CHUNK}", "dave", upload=True),
        "PutUploadPart: another client's upload": Case("PutUploadPart", lambda t: part(t, client_id="alice"), DENIED,
                                                       r"belongs to another client, not alice", upload=True),
        "GetUpload: another client's upload": Case("GetUpload", lambda t: pb.UploadRef(
            client_id="alice", upload_id=t.upload_id), DENIED, r"belongs to another client, not alice", upload=True),
        "CommitUpload: before every byte arrived": Case("CommitUpload", lambda t: pb.UploadRef(
            client_id="dave", upload_id=t.upload_id), PRECONDITION, rf"has 0 of its {4 * P_MLP} bytes; put the rest "
            r"from offset 0 before committing", "dave", upload=True),
    }


CASES = _cases()


async def refusal(t: Target, case: Case) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await t.send(case.method, case.request(t), case.who, case.metadata or None)
    return e.value.code(), e.value.details() or ""


@pytest.mark.parametrize("name", list(CASES))
async def test_a_bad_input_gets_its_code_and_says_what_was_wrong(target, name):
    case = CASES[name]
    if case.upload:
        await open_upload(target)
    before = state_snapshot(target.coord)
    code, details = await refusal(target, case)
    assert code == case.code, (code, details)
    assert re.search(case.says, details), details
    assert state_snapshot(target.coord) == before
