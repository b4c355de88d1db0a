"""A real `fedort coordinator serve` subprocess, SIGKILLed mid-run and restarted on the same state dir,
ends with the same global vector as an uninterrupted run: nothing acknowledged is lost, nothing
is counted twice, committed vectors never change."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from chaos_support import fault_env, fault_fired
from coordinator_fixtures import P_MLP, chunks_of, mlp_artifacts, update_header  # noqa: F401
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc

CLIENTS = ("client-0000", "client-0001", "client-0002")
EXAMPLES = {"client-0000": 10, "client-0001": 20, "client-0002": 30}
ROUNDS = 3


def serve_command(artifacts: Path, state_dir: Path, port_file: Path, *extra: str) -> list[str]:
    fedort = Path(sys.executable).with_name("fedort")
    prefix = [str(fedort)] if fedort.exists() else [sys.executable, "-m", "coordinator"]
    return prefix + (["coordinator"] if fedort.exists() else []) + [
        "serve", "--artifacts", str(artifacts), "--state-dir", str(state_dir), "--address", "127.0.0.1:0",
        "--port-file", str(port_file), "--rounds", str(ROUNDS), "--min-clients", "3", "--round-timeout-s", "30",
        "--client-timeout-s", "0", "--insecure", "--auth", "open", *extra,
    ]


class Server:
    """One coordinator process; the fixture kills whatever is left."""

    def __init__(self, artifacts: Path, state_dir: Path, log: Path, *extra: str, fault: str | None = None) -> None:
        self.port_file = state_dir.parent / f"{state_dir.name}.port"
        self.port_file.unlink(missing_ok=True)
        self.log, self.fault_log = log, state_dir.parent / f"{state_dir.name}.faults"
        self.proc = subprocess.Popen(serve_command(artifacts, state_dir, self.port_file, *extra),
                                     stdout=subprocess.DEVNULL, stderr=open(log, "ab"),
                                     env=fault_env(fault, self.fault_log))
        deadline = time.monotonic() + 20
        while not self.port_file.exists():
            assert self.proc.poll() is None, f"coordinator exited early; see {log}"
            assert time.monotonic() < deadline, "coordinator did not write its port file within 20 s"
            time.sleep(0.02)
        self.port = int(self.port_file.read_text())
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = pb_grpc.CoordinatorStub(self.channel)

    def fault_fired(self) -> str:
        """Wait until the process killed itself at its armed fault point; that point ("NAME@N kill")."""
        self.channel.close()
        return fault_fired(self.proc, self.fault_log, self.log)

    def kill(self) -> None:
        self.channel.close()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def servers(mlp_artifacts, tmp_path):
    started: list[Server] = []

    def start(state_dir: Path, *extra: str, fault: str | None = None) -> Server:
        s = Server(mlp_artifacts, state_dir, tmp_path / "coordinator.log", *extra, fault=fault)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(10)
        s.channel.close()


def local_update(cid: str, round: int, global_vector: np.ndarray) -> np.ndarray:
    """What a deterministic client "trains": half the global vector plus its own seeded noise."""
    rng = np.random.default_rng([int(cid[-4:]), round])
    return (0.5 * global_vector + rng.standard_normal(P_MLP)).astype(np.float32)


def fit(server: Server, cid: str, model: str, round: int) -> pb.SubmitReply:
    task = server.stub.PollTask(pb.PollRequest(client_id=cid, model_id=model, wait_ms=10_000), timeout=20)
    assert (task.kind, task.round) == (pb.Task.FIT, round), task
    parts = list(server.stub.DownloadVector(pb.VectorRequest(client_id=cid, model_id=model, round=round), timeout=10))
    vector = np.frombuffer(b"".join(p.chunk for p in parts[1:]), dtype="<f4")
    return submit(server, cid, model, round, local_update(cid, round, vector), task.vector_sha256)


def submit(server: Server, cid: str, model: str, round: int, update: np.ndarray, trained_from: bytes) -> pb.SubmitReply:
    header = update_header(cid, model, round, update, EXAMPLES[cid], trained_from=trained_from)
    parts = [pb.UpdatePart(header=header)] + [pb.UpdatePart(chunk=c) for c in chunks_of(update)]
    return server.stub.SubmitUpdate(iter(parts), timeout=20)


def join_all(server: Server) -> str:
    return [server.stub.Join(pb.JoinRequest(client_id=c), timeout=10) for c in CLIENTS][0].model_id


def finish(server: Server, model: str) -> None:
    for cid in CLIENTS:  # every client hears DONE, then the process exits by itself
        task = server.stub.PollTask(pb.PollRequest(client_id=cid, model_id=model, wait_ms=10_000), timeout=20)
        assert task.kind == pb.Task.DONE
    assert server.proc.wait(20) == 0


def expected_final(initial: np.ndarray) -> np.ndarray:
    g = initial
    for r in range(1, ROUNDS + 1):
        total = sum(EXAMPLES[c] * local_update(c, r, g).astype(np.float64) for c in CLIENTS)
        g = (total / sum(EXAMPLES.values())).astype(np.float32)
    return g


def vectors(state_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((state_dir / "vectors").glob("round-*.f32"))}


@pytest.fixture(scope="module")
def uninterrupted(mlp_artifacts, tmp_path_factory) -> dict[str, bytes]:
    """The global vectors of one run without crashes (once per module)."""
    tmp = tmp_path_factory.mktemp("reference")
    server = Server(mlp_artifacts, tmp / "state", tmp / "coordinator.log")
    try:
        model = join_all(server)
        for r in range(1, ROUNDS + 1):
            for cid in CLIENTS:
                assert fit(server, cid, model, r).accepted
        finish(server, model)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(10)
        server.channel.close()
    return vectors(tmp / "state")


@pytest.mark.slow
def test_uninterrupted_run_matches_the_numpy_weighted_mean(uninterrupted):
    initial = np.frombuffer(uninterrupted["round-0001.f32"], dtype="<f4")
    final = np.frombuffer(uninterrupted[f"round-{ROUNDS + 1:04d}.f32"], dtype="<f4")
    np.testing.assert_allclose(final, expected_final(initial), atol=1e-6)


@pytest.mark.slow
def test_sigkill_after_an_acknowledged_update_resumes_without_loss_or_double_count(servers, uninterrupted, tmp_path):
    state = tmp_path / "crashed"
    server = servers(state)
    model = join_all(server)
    for cid in CLIENTS:
        fit(server, cid, model, 1)
    first = fit(server, CLIENTS[0], model, 2)
    assert first.accepted
    committed = vectors(state)
    server.kill()                                   # mid-round: one of three updates acknowledged

    server = servers(state)
    assert vectors(state) == committed               # committed vectors unchanged by the restart
    # the acknowledged update was replayed: its client has no task, and re-sending it is a duplicate
    task = server.stub.PollTask(pb.PollRequest(client_id=CLIENTS[0], model_id=model, wait_ms=200), timeout=10)
    assert task.kind == pb.Task.WAIT
    parts = list(server.stub.DownloadVector(pb.VectorRequest(client_id=CLIENTS[0], model_id=model, round=2), timeout=10))
    again = submit(server, CLIENTS[0], model, 2,
                   local_update(CLIENTS[0], 2, np.frombuffer(b"".join(p.chunk for p in parts[1:]), dtype="<f4")),
                   parts[0].header.sha256)
    assert again.accepted and again.duplicate
    for cid in CLIENTS[1:]:
        fit(server, cid, model, 2)
    for cid in CLIENTS:
        fit(server, cid, model, 3)
    finish(server, model)
    final = f"round-{ROUNDS + 1:04d}.f32"
    np.testing.assert_allclose(np.frombuffer(vectors(state)[final], dtype="<f4"),
                               np.frombuffer(uninterrupted[final], dtype="<f4"), atol=1e-6)
    for r in range(1, ROUNDS + 1):
        assert (state / "models" / f"round-{r:04d}" / "model.json").is_file()


def landing(state_dir: Path) -> str:
    """Where a kill landed in round 2's close, read from what it left on disk."""
    con = sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True)
    try:
        (row_state,) = con.execute("SELECT state FROM rounds WHERE round = 2").fetchone()
        (updates,) = con.execute("SELECT COUNT(*) FROM submissions WHERE round = 2").fetchone()
    finally:
        con.close()
    assert updates == len(CLIENTS), f"every update of round 2 was acknowledged before the kill, found {updates}"
    model_json = (state_dir / "models" / "round-0002" / "model.json").is_file()
    if row_state == "TRAINING":
        return "open"            # acknowledged, not yet committed: the restart replays the spool
    if row_state == "COMMITTED":
        return "committed"       # committed, export not recorded: the restart redoes it
    assert row_state == "EXPORTED" and model_json, (row_state, model_json)
    return "exported"


# Each fault point of a round's close (fedort.common.faults), the window it marks, as `landing` reads it from disk
CLOSE_WINDOWS = {
    "round.before_commit": "open",        # every update acknowledged; nothing of the close written
    "export.before_write": "committed",   # the commit durable; the export not begun
    "export.before_mark": "committed",    # the model files written; the export not recorded
    "export.after_mark": "exported",      # the export recorded
}


def close_round_2_and_die(server: Server, model: str) -> str:
    """Rounds 1 and 2 with every client; the server, armed at a point of round 2's close, dies there."""
    for r in (1, 2):
        for cid in CLIENTS:
            try:
                fit(server, cid, model, r)
            except grpc.RpcError as e:   # the last ack of round 2 may be lost with the process (it is durable)
                assert (r, cid) == (2, CLIENTS[-1]) and e.code() == grpc.StatusCode.UNAVAILABLE, e
    return server.fault_fired()


@pytest.mark.slow
@pytest.mark.parametrize("point", list(CLOSE_WINDOWS))
def test_sigkill_while_a_round_closes_resumes_into_the_next_round(servers, uninterrupted, tmp_path, point):
    state = tmp_path / "crashed-closing"
    server = servers(state, fault=f"{point}@2")     # the close of round 1 passes the point once
    model = join_all(server)
    assert close_round_2_and_die(server, model) == f"{point}@2 kill"
    landed = landing(state)
    assert landed == CLOSE_WINDOWS[point]
    log = tmp_path / "coordinator.log"
    log_before = log.read_text() if log.exists() else ""
    server = servers(state)
    restart_log = log.read_text()[len(log_before):]
    if landed == "open":
        assert "round 2: replayed 3 acknowledged updates" in restart_log, restart_log[-2000:]
    elif landed == "committed":
        assert "round 2: redoing the export" in restart_log, restart_log[-2000:]
    else:
        assert "round 2: redoing the export" not in restart_log and "round 2: replayed" not in restart_log, \
            restart_log[-2000:]
    for cid in CLIENTS:
        fit(server, cid, model, 3)
    finish(server, model)
    final = f"round-{ROUNDS + 1:04d}.f32"
    np.testing.assert_allclose(np.frombuffer(vectors(state)[final], dtype="<f4"),
                               np.frombuffer(uninterrupted[final], dtype="<f4"), atol=1e-6)
    assert (state / "models" / "round-0002" / "model.json").is_file()   # an interrupted export is redone


@pytest.mark.slow
@pytest.mark.parametrize("point", list(CLOSE_WINDOWS))
def test_sigkill_around_an_external_data_export_leaves_every_round_s_model_loadable(servers, uninterrupted, tmp_path,
                                                                                   point):
    external = ("--export-external-bytes", "0")   # model.onnx + model.onnx.data, a hard link (export_external)
    state = tmp_path / "crashed-external"
    server = servers(state, *external, fault=f"{point}@2")
    model = join_all(server)
    assert close_round_2_and_die(server, model) == f"{point}@2 kill"
    assert landing(state) == CLOSE_WINDOWS[point]
    server = servers(state, *external)
    for cid in CLIENTS:
        fit(server, cid, model, 3)
    finish(server, model)
    x = np.random.default_rng(0).random((3, 64), dtype=np.float32)
    for r in range(1, ROUNDS + 1):
        folder, vector_file = state / "models" / f"round-{r:04d}", state / "vectors" / f"round-{r + 1:04d}.f32"
        assert os.stat(folder / "model.onnx.data").st_ino == os.stat(vector_file).st_ino
        assert sorted(p.name for p in folder.iterdir()) == ["model.json", "model.onnx", "model.onnx.data"]
        vector = np.frombuffer(vector_file.read_bytes(), dtype="<f4")
        loaded = [numpy_helper.to_array(i).ravel() for i in onnx.load(str(folder / "model.onnx")).graph.initializer]
        assert np.array_equal(np.sort(np.concatenate(loaded)), np.sort(vector))   # the parameters are the vector
        ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    final = f"round-{ROUNDS + 1:04d}.f32"
    np.testing.assert_allclose(np.frombuffer(vectors(state)[final], dtype="<f4"),
                               np.frombuffer(uninterrupted[final], dtype="<f4"), atol=1e-6)
