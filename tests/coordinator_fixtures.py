"""Shared fixtures of the coordinator tests: real artifacts, real coordinators on 127.0.0.1:0, a stub client.

The stub client speaks the wire protocol with the generated stub directly (the edge client is a
separate component); it can also send malformed streams, which the bad-input tests need.
Import what a module uses explicitly: `from coordinator_fixtures import mlp_artifacts, ...`.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Iterable, Sequence

import grpc
import numpy as np
import pytest

from fedort.common.clock import ManualClock, use
from fedort.coordinator import Coordinator, CoordinatorConfig, RoundState
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc
from fedort.protos.vector_stream import CHUNK_BYTES
from fedort.coordinator import Coordinator, CoordinatorConfig
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc
from fedort.protos.vector_stream import CHUNK_BYTES

RPC_TIMEOUT = 15.0
P_MLP = 9610


@pytest.fixture(scope="session")
def mlp_artifacts(mlp_artifacts) -> Path:
    """conftest's session-wide artifacts of the built-in digits MLP (9610 trainable parameters), which no test
    writes into. Defined here too so modules can import it by name; each importing module registers its own
    copy of this fixture, so building here would build once per module."""
    return mlp_artifacts


def make_config(artifacts: Path, state_dir: Path, **overrides) -> CoordinatorConfig:
    values = dict(artifacts=artifacts, state_dir=state_dir, address="127.0.0.1:0", rounds=2, min_clients=2,
                  round_timeout_s=20, client_timeout_s=0,
                  insecure=True, auth="open", submissions_per_minute=0)   # tests of security set these explicitly
    values.update(overrides)
    return CoordinatorConfig.from_mapping(values)


@pytest.fixture
async def start_coordinator(tmp_path, mlp_artifacts):
    """`await start_coordinator(**config overrides)` -> a started Coordinator, stopped after the test."""
    started: list[Coordinator] = []

    async def start(**overrides) -> Coordinator:
        overrides.setdefault("state_dir", tmp_path / "state")
        coordinator = Coordinator(make_config(mlp_artifacts, **overrides))
        await coordinator.start()
        started.append(coordinator)
        return coordinator

    yield start
    for c in started:
        await asyncio.wait_for(c.stop(grace=0), 20)


@pytest.fixture
async def stub_client():
    """`stub_client(port)` -> a StubClient, closed after the test."""
    clients: list[StubClient] = []

    def connect(port: int) -> StubClient:
        c = StubClient(port)
        clients.append(c)
        return c

    yield connect
    for c in clients:
        await asyncio.wait_for(c.close(), 20)


def digest(vector: np.ndarray) -> bytes:
    return hashlib.sha256(np.ascontiguousarray(vector, dtype="<f4").tobytes()).digest()


#: (model id, round) -> sha256 of the global vector a stub client last saw announced for it (poll, download):
#: what `update_header` names as trained_from_sha256 unless told otherwise.
GLOBALS_SEEN: dict[tuple[str, int], bytes] = {}


def update_header(client_id: str, model_id: str, round: int, vector: np.ndarray, num_examples: int,
                  metrics: dict[str, tuple[float, bool]] | None = None, *, trained_from: bytes | None = None,
                  **vector_fields) -> pb.UpdateHeader:
    fields = dict(model_id=model_id, round=round, length=vector.shape[0], dtype="float32", codec="raw",
                  sha256=digest(vector), chunk_size=CHUNK_BYTES)
    fields.update(vector_fields)
    if trained_from is None:
        trained_from = GLOBALS_SEEN.get((model_id, round), b"")
    return pb.UpdateHeader(client_id=client_id, vector=pb.VectorHeader(**fields), num_examples=num_examples,
                           metrics={k: pb.Metric(value=v, sync_dist=s) for k, (v, s) in (metrics or {}).items()},
                           trained_from_sha256=trained_from)


def chunks_of(vector: np.ndarray, size: int = CHUNK_BYTES) -> list[bytes]:
    raw = np.ascontiguousarray(vector, dtype="<f4").tobytes()
    return [raw[i:i + size] for i in range(0, len(raw), size)]


class StubClient:
    """A minimal protocol client over the generated stub (every call has a deadline)."""

    def __init__(self, port: int) -> None:
        self.channel = grpc.aio.insecure_channel(
            f"127.0.0.1:{port}",
            options=[("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)])
        self.stub = pb_grpc.CoordinatorStub(self.channel)

    async def close(self) -> None:
        await self.channel.close()

    async def join(self, client_id: str = "", device_name: str = "stub") -> pb.JoinReply:
        return await self.stub.Join(pb.JoinRequest(client_id=client_id, device_name=device_name), timeout=RPC_TIMEOUT)

    async def poll(self, client_id: str, model_id: str, wait_ms: int = 5000) -> pb.Task:
        task = await self.stub.PollTask(pb.PollRequest(client_id=client_id, model_id=model_id, wait_ms=wait_ms),
                                        timeout=RPC_TIMEOUT + wait_ms / 1000)
        if task.kind == pb.Task.FIT:
            GLOBALS_SEEN[(model_id, task.round)] = task.vector_sha256
        return task

    async def download_vector(self, client_id: str, model_id: str, round: int) -> tuple[pb.VectorHeader, np.ndarray]:
        header, parts = None, []
        async for part in self.stub.DownloadVector(
                pb.VectorRequest(client_id=client_id, model_id=model_id, round=round), timeout=RPC_TIMEOUT):
            if part.WhichOneof("part") == "header":
                header = part.header
            else:
                parts.append(part.chunk)
        vector = np.frombuffer(b"".join(parts), dtype="<f4")
        assert hashlib.sha256(vector.tobytes()).digest() == header.sha256
        GLOBALS_SEEN[(model_id, round)] = header.sha256
        return header, vector

    async def submit_parts(self, parts: Iterable[pb.UpdatePart]) -> pb.SubmitReply:
        """Stream `parts`; the reply, or AioRpcError with the server's status.

        Writes go through the call object: when the server rejects the stream early, a write may
        fail locally, but the call still ends with the status the server sent.
        """
        parts = list(parts)
        for attempt in range(3):
            call = self.stub.SubmitUpdate(timeout=RPC_TIMEOUT)
            try:
                for p in parts:
                    await call.write(p)
                await call.done_writing()
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass
            try:
                return await call
            except grpc.aio.AioRpcError as e:
                # grpc-aio race: when the server rejects a stream while this side still sends,
                # the failed send can win and the call ends INTERNAL "Internal error from Core"
                # instead of with the server's status; sending again gets the server's answer.
                if e.code() != grpc.StatusCode.INTERNAL or "from Core" not in (e.details() or "") or attempt == 2:
                    raise

    async def submit(self, client_id: str, model_id: str, round: int, vector: np.ndarray, num_examples: int,
                     metrics: dict[str, tuple[float, bool]] | None = None, *, chunks: Sequence[bytes] | None = None,
                     **vector_fields) -> pb.SubmitReply:
        header = update_header(client_id, model_id, round, vector, num_examples, metrics, **vector_fields)
        parts = [pb.UpdatePart(header=header)]
        parts += [pb.UpdatePart(chunk=c) for c in (chunks if chunks is not None else chunks_of(vector))]
        return await self.submit_parts(parts)

    async def fit_round(self, client_id: str, model_id: str, delta: float, num_examples: int,
                        metrics: dict[str, tuple[float, bool]] | None = None) -> tuple[pb.Task, np.ndarray, pb.SubmitReply]:
        """Poll for FIT, download the round's vector, submit vector + delta."""
        task = await self.poll(client_id, model_id)
        assert task.kind == pb.Task.FIT, f"expected FIT, got {pb.Task.Kind.Name(task.kind)}"
        _, vector = await self.download_vector(client_id, model_id, task.round)
        update = (vector + np.float32(delta)).astype(np.float32)
        reply = await self.submit(client_id, model_id, task.round, update, num_examples, metrics)
        return task, vector, reply


async def opened_round(start_coordinator, stub_client, **config):
    """A started coordinator (1 round, 1 client) whose round 1 is open for "client-a", which has joined, polled
    and downloaded the global vector: (coordinator, client, model id, round, global vector, local vector dir or
    None)."""
    coord = await start_coordinator(min_clients=1, rounds=1, **config)
    client = stub_client(coord.port)
    join = await client.join("client-a")
    task = await client.poll("client-a", join.model_id)
    _, g = await client.download_vector("client-a", join.model_id, task.round)
    return coord, client, join.model_id, task.round, g, Path(join.local_vector_dir) if join.local_vector_dir else None


def nothing_changed(coord: Coordinator, round: int) -> None:
    """A refused update left no trace: no submission row, no reported client, nothing spooled."""
    assert coord.engine.store.submissions(round) == [] and coord.engine.training.reported == {}
    spool = coord.engine.store.spool_dir(round)
    assert not spool.exists() or list(spool.iterdir()) == []


async def wait_for_metric(coordinator: Coordinator, name: str, ok, labels: dict[str, str] | None = None,
                          timeout: float = 60.0) -> float:
    """Until the coordinator's own metric `name` satisfies `ok(value)`: observable state, not a sleep."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = coordinator.monitoring.registry.get_sample_value(name, labels or {})
        if value is not None and ok(value):
            return value
        assert asyncio.get_running_loop().time() < deadline, f"{name}{labels or ''} stayed at {value}"
        await asyncio.sleep(0.01)


@pytest.fixture
def manual_clock():
    """The process's clock (fedort.common.clock) replaced by one the test moves, for deadlines and timeouts."""
    with use(ManualClock()) as clock:
        yield clock


async def pass_the_deadline(coord, clock: ManualClock, attempt: int = 1) -> None:
    """Once attempt `attempt` of the open round is training, move `clock` past its deadline and wake the engine."""
    engine = coord.engine
    for _ in range(1500):
        if engine.attempt == attempt and engine.state is RoundState.TRAINING and engine.deadline_ms:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError(f"attempt {attempt} did not start training (attempt {engine.attempt}, {engine.state})")
    clock.advance(max(0.0, engine.deadline_ms / 1000 - clock.now()) + 1)
    engine.notify()
