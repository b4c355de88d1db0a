"""The co-located vector path keeps the durability promise: a `fedort coordinator serve --local-vector-dir`
subprocess SIGKILLed right after acknowledging an update handed over as a file restarts into the same
round with that update counted once, and ends with the global vector a streamed run ends with, bit for bit."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from coordinator_fixtures import P_MLP, chunks_of, mlp_artifacts, update_header  # noqa: F401 (fixture)
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc

CLIENTS = {"client-0000": 10, "client-0001": 20, "client-0002": 30}
ROUNDS = 2


class Server:
    """One `fedort coordinator serve` process (killed by the fixture if still running)."""

    def __init__(self, artifacts: Path, state_dir: Path, *flags: str) -> None:
        port_file = state_dir.parent / f"{state_dir.name}.port"
        port_file.unlink(missing_ok=True)
        fedort = Path(sys.executable).with_name("fedort")
        self.proc = subprocess.Popen(
            [str(fedort), "coordinator", "serve", "--artifacts", str(artifacts), "--state-dir", str(state_dir),
             "--address", "127.0.0.1:0", "--port-file", str(port_file), "--rounds", str(ROUNDS), "--min-clients", "3",
             "--round-timeout-s", "30", "--client-timeout-s", "0", "--insecure", "--auth", "open", *flags],
            stdout=subprocess.DEVNULL, stderr=open(state_dir.parent / "coordinator.log", "ab"))
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert self.proc.poll() is None, "coordinator exited early"
            assert time.monotonic() < deadline, "coordinator did not write its port file within 30 s"
            time.sleep(0.02)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{int(port_file.read_text())}")
        self.stub = pb_grpc.CoordinatorStub(self.channel)

    def stop(self, sig: int = signal.SIGKILL) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)


@pytest.fixture
def servers(mlp_artifacts):
    started: list[Server] = []

    def start(state_dir: Path, *flags: str) -> Server:
        started.append(Server(mlp_artifacts, state_dir, *flags))
        return started[-1]

    yield start
    for s in started:
        s.stop()


def fit(server: Server, cid: str, model: str, round: int, local: Path | None) -> pb.SubmitReply:
    """Poll, download, submit half the global vector plus seeded noise (as a file when `local` is set)."""
    task = server.stub.PollTask(pb.PollRequest(client_id=cid, model_id=model, wait_ms=10_000), timeout=20)
    assert (task.kind, task.round) == (pb.Task.FIT, round), task
    parts = list(server.stub.DownloadVector(pb.VectorRequest(client_id=cid, model_id=model, round=round), timeout=10))
    g = np.frombuffer(b"".join(p.chunk for p in parts[1:]), dtype="<f4")
    update = (0.5 * g + np.random.default_rng([int(cid[-4:]), round]).standard_normal(P_MLP)).astype(np.float32)
    header = update_header(cid, model, round, update, CLIENTS[cid], trained_from=task.vector_sha256)
    if local is None:
        return server.stub.SubmitUpdate(iter([pb.UpdatePart(header=header)] +
                                             [pb.UpdatePart(chunk=c) for c in chunks_of(update)]), timeout=20)
    header.local_file = f"{cid}.r{round}.f32"
    (local / header.local_file).write_bytes(update.tobytes())
    return server.stub.SubmitUpdate(iter([pb.UpdatePart(header=header)]), timeout=20)


def run(server: Server, model: str, rounds: range, local: Path | None) -> None:
    for r in rounds:
        for cid in CLIENTS:
            assert fit(server, cid, model, r, local).accepted


def finish(server: Server, model: str) -> None:
    for cid in CLIENTS:
        task = server.stub.PollTask(pb.PollRequest(client_id=cid, model_id=model, wait_ms=10_000), timeout=20)
        assert task.kind == pb.Task.DONE
    assert server.proc.wait(20) == 0


@pytest.mark.slow
def test_sigkill_after_an_acknowledged_file_update_resumes_without_loss_and_matches_a_streamed_run(
        servers, tmp_path):
    streamed = servers(tmp_path / "streamed")
    model = [streamed.stub.Join(pb.JoinRequest(client_id=c), timeout=10) for c in CLIENTS][0].model_id
    run(streamed, model, range(1, ROUNDS + 1), None)
    finish(streamed, model)

    state, local = tmp_path / "crashed", tmp_path / "crashed-local"
    flags = ("--local-vector-dir", str(local))
    server = servers(state, *flags)
    for c in CLIENTS:
        server.stub.Join(pb.JoinRequest(client_id=c), timeout=10)
    run(server, model, range(1, 2), local)
    first = next(iter(CLIENTS))
    assert fit(server, first, model, 2, local).accepted
    server.stop()                                    # SIGKILL: one of round 2's three updates acknowledged

    server = servers(state, *flags)
    task = server.stub.PollTask(pb.PollRequest(client_id=first, model_id=model, wait_ms=200), timeout=10)
    assert task.kind == pb.Task.WAIT                 # its update was replayed from the spool
    for cid in list(CLIENTS)[1:]:
        assert fit(server, cid, model, 2, local).accepted
    finish(server, model)
    final = f"vectors/round-{ROUNDS + 1:04d}.f32"
    assert (state / final).read_bytes() == (tmp_path / "streamed" / final).read_bytes()
    assert sorted(p.name for p in local.iterdir() if p.name != ".free") == ["global"]   # .free: recycled spool files
