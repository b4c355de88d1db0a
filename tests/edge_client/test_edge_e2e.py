"""End to end: a `fedort coordinator serve` process and real `fedort edge run` processes on loopback.

Digits is split into three client files and a test file; the coordinator keeps its spool so
every round's global vector can be checked against the FedAvg of the updates it acknowledged.
Processes are always killed in the fixture's teardown.
"""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest


CLI = [sys.executable, "-m", "fedort"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """client-0.npz .. client-2.npz (x float32 [N, 64] in [0, 1], labels int64) and test.npz."""
    from sklearn.datasets import load_digits

    folder = tmp_path_factory.mktemp("digits")
    d = load_digits()
    x, labels = (d.data / 16).astype(np.float32), d.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(labels))
    test, train = order[:360], order[360:]
    files = {"test": folder / "test.npz"}
    np.savez(files["test"], x=x[test], labels=labels[test])
    for i in range(3):
        rows = train[i::3]
        files[i] = folder / f"client-{i}.npz"
        np.savez(files[i], x=x[rows], labels=labels[rows])
    return files


class Procs:
    """Started subprocesses (output to files); all killed at teardown."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, args: list[str]) -> subprocess.Popen:
        out = open(self.folder / f"{name}.out", "w")
        err = open(self.folder / f"{name}.err", "w")
        p = subprocess.Popen(args, stdout=out, stderr=err, cwd=self.folder)
        p.name, p.out_path, p.err_path = name, self.folder / f"{name}.out", self.folder / f"{name}.err"
        out.close()
        err.close()
        self.procs.append(p)
        return p

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)


@pytest.fixture
def procs(tmp_path):
    ps = Procs(tmp_path)
    yield ps
    ps.kill_all()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def query(state: Path, sql: str, *args) -> list[tuple]:
    """Rows of `sql` on the state dir's database; a missing database or an SQL error fails the test."""
    assert (state / "state.db").is_file(), f"no {state / 'state.db'}"
    con = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def query_when_ready(state: Path, sql: str, *args) -> list[tuple]:
    """`query` for polling while the coordinator starts: [] until its database and tables exist."""
    try:
        return query(state, sql, *args)
    except (AssertionError, sqlite3.OperationalError):
        return []


def start_coordinator(procs: Procs, artifacts: Path, state: Path, port: int = 0, name: str = "coordinator",
                      **flags) -> int:
    port_file = state.parent / f"{name}.port"
    port_file.unlink(missing_ok=True)
    args = [*CLI, "coordinator", "serve", "--artifacts", str(artifacts), "--state-dir", str(state),
            "--address", f"127.0.0.1:{port}", "--port-file", str(port_file), "--keep-spool", "--insecure", "--auth", "open"]
    for k, v in flags.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    p = procs.start(name, args)
    wait_for(lambda: port_file.exists() or p.poll() is not None, 30, "the coordinator's port file")
    assert p.poll() is None, p.err_path.read_text()
    return int(port_file.read_text())


def start_edge(procs: Procs, port: int, data: Path, name: str, *extra: str) -> subprocess.Popen:
    cache = procs.folder / f"cache-{name}"
    return procs.start(name, [*CLI, "edge", "run", "--coordinator", f"127.0.0.1:{port}", "--data", str(data),
                              "--cache-dir", str(cache), "--name", name, "--poll-wait-ms", "1000", "--insecure",
                              "--debug-modules", str(procs.folder / f"{name}.modules.json"), *extra])


def finish(p: subprocess.Popen, timeout: float) -> int:
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError(f"{p.name} did not finish in {timeout} s:\n{p.err_path.read_text()[-3000:]}")


def fedavg_matches(state: Path, round: int) -> int:
    """Assert the global vector after `round` is the weighted mean of its acknowledged updates."""
    rows = query(state, "SELECT client_id, num_examples, spool_path FROM submissions WHERE round = ?", round)
    assert rows, f"no submissions recorded for round {round}"
    total = sum(n for _, n, _ in rows)
    acc = sum(n * np.fromfile(state / path, dtype="<f4").astype(np.float64) for _, n, path in rows)
    expected = (acc / total).astype(np.float32)
    got = np.fromfile(state / "vectors" / f"round-{round + 1:04d}.f32", dtype="<f4")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    return len(rows)


def accuracy(model: Path, test: Path) -> float:
    t = np.load(test)
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    logits = sess.run(None, {"x": t["x"]})[0]
    return float((logits.argmax(axis=1) == t["labels"]).mean())


def assert_device_modules_only(procs: Procs, name: str) -> None:
    modules = json.loads((procs.folder / f"{name}.modules.json").read_text())
    leaked = [m for m in modules if m.split(".")[0] in ("coordinator", "torch")]
    assert leaked == [], f"the edge client imported {leaked}"
    assert "onnxruntime" in modules and "grpc" in modules  # the file does describe a working client


# ---- the run ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_three_devices_train_three_rounds_of_fedavg(procs, tmp_path, mlp_artifacts, data):
    state = tmp_path / "state"
    port = start_coordinator(procs, mlp_artifacts, state, rounds=3, min_clients=3, lr=0.003, round_timeout=40)
    edges = [start_edge(procs, port, data[i], f"dev{i}") for i in range(3)]
    for p in edges:
        assert finish(p, 120) == 0, p.err_path.read_text()[-3000:]
    for i, p in enumerate(edges):
        out = p.out_path.read_text()
        assert "joined 127.0.0.1" in out and all(f"round {r} fit:" in out for r in (1, 2, 3)), out
        assert "done: 3 round(s) trained" in out
        assert_device_modules_only(procs, f"dev{i}")
    assert [fedavg_matches(state, r) for r in (1, 2, 3)] == [3, 3, 3]
    acc = [accuracy(state / "models" / f"round-{r:04d}" / "model.onnx", data["test"]) for r in (1, 2, 3)]
    assert acc[0] < acc[1] < acc[2] and acc[2] > 0.8, acc


@pytest.mark.slow
def test_a_client_killed_mid_upload_leaves_the_round_to_the_others(procs, tmp_path, mlp_artifacts, data):
    state = tmp_path / "state"
    port = start_coordinator(procs, mlp_artifacts, state, rounds=1, min_clients=2, min_available_clients=3,
                             fraction=1.0, round_timeout=10)
    uploader = tmp_path / "stalled_upload.py"
    uploader.write_text(STALLED_UPLOAD)
    doomed = procs.start("doomed", [sys.executable, str(uploader), f"127.0.0.1:{port}", str(data[2]),
                                    str(tmp_path / "cache-doomed")])
    edges = [start_edge(procs, port, data[i], f"dev{i}") for i in range(2)]
    wait_for(lambda: "UPLOADING" in doomed.out_path.read_text() or doomed.poll() is not None, 30,
             "the doomed client to start its upload")
    assert doomed.poll() is None, doomed.err_path.read_text()
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(10)
    for p in edges:
        assert finish(p, 120) == 0, p.err_path.read_text()[-3000:]
    ((clients, state_name),) = query(state, "SELECT clients, state FROM rounds WHERE round = 1")
    assert clients == 2 and state_name in ("COMMITTED", "EXPORTED")
    assert fedavg_matches(state, 1) == 2
    doomed_id = query(state, "SELECT client_id FROM clients WHERE device_name = 'doomed'")[0][0]
    assert query(state, "SELECT * FROM submissions WHERE client_id = ?", doomed_id) == []
    assert not list((state / "spool").rglob(f"*{doomed_id}*"))
    assert query(state, "PRAGMA integrity_check") == [("ok",)]
    assert (state / "models" / "round-0001" / "model.onnx").is_file()


STALLED_UPLOAD = r'''
"""A device that joins, gets a FIT task and stalls halfway through streaming its update."""
import sys, time
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc
from fedort.protos.vector_stream import describe, iter_chunks
from fedort.protos.messages import TaskKind, UpdateHeader
from fedort.edge_client import EdgeClient, EdgeConfig

address, data, cache = sys.argv[1:4]
client = EdgeClient(EdgeConfig(address, data=data, cache_dir=cache, name="doomed", poll_wait_ms=1000, insecure=True))
client.join()
task = client.poll()
while task.kind != TaskKind.FIT:
    task = client.poll()
vector = client.session.to_buffer().copy()
meta = describe(vector, client.model_id, task.round, chunk_size=4096)

def parts():
    yield pb.UpdatePart(header=UpdateHeader(client.client_id, meta, 100, {}, task.vector_sha256).to_pb())
    chunks = iter_chunks(vector, 4096)
    for _ in range(3):
        yield pb.UpdatePart(chunk=next(chunks))
    print("UPLOADING", flush=True)
    time.sleep(120)

pb_grpc.CoordinatorStub(client.transport.channel).SubmitUpdate(parts(), timeout=120)
'''


@pytest.mark.slow
def test_clients_reconnect_when_the_coordinator_is_killed_and_restarted(procs, tmp_path, mlp_artifacts, data):
    state, port = tmp_path / "state", free_port()
    flags = dict(rounds=3, min_clients=3, local_epochs=40, round_timeout=40)
    start_coordinator(procs, mlp_artifacts, state, port, **flags)
    edges = [start_edge(procs, port, data[i], f"dev{i}") for i in range(3)]
    wait_for(lambda: query_when_ready(state, "SELECT 1 FROM rounds WHERE round = 2"), 40, "round 2 to open")
    # every client has cached round 2's global vector, so it trains round 2 now (40 local epochs):
    # its upload will meet a dead coordinator
    wait_for(lambda: all(len(list((procs.folder / f"cache-dev{i}" / "vectors").glob("*.f32"))) >= 2 for i in range(3)),
             40, "every client to fetch round 2's vector")
    first = procs.procs[0]
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    assert all(p.poll() is None for p in edges), "a client gave up when the coordinator died"
    wait_for(lambda: any("; retry " in p.err_path.read_text() for p in edges), 60,
             "a client to meet the dead coordinator and retry")
    start_coordinator(procs, mlp_artifacts, state, port, name="coordinator-2", **flags)
    for p in edges:
        assert finish(p, 120) == 0, p.err_path.read_text()[-3000:]
    ids = {c for (c,) in query(state, "SELECT client_id FROM clients")}
    assert len(ids) == 3  # nobody re-registered under a new identity
    assert sorted(query(state, "SELECT round, client_id FROM submissions")) == sorted(
        (r, c) for r in (1, 2, 3) for c in ids)
    assert [fedavg_matches(state, r) for r in (1, 2, 3)] == [3, 3, 3]


# ---- refusals and stopping ----------------------------------------------------------------------

@pytest.mark.slow
def test_a_bad_data_file_is_refused_before_joining(procs, tmp_path, mlp_artifacts, data):
    state = tmp_path / "state"
    port = start_coordinator(procs, mlp_artifacts, state, rounds=1)
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros((10, 64), np.float32), labels=np.zeros(9, np.int64))
    ragged = start_edge(procs, port, bad, "ragged")
    missing = start_edge(procs, port, tmp_path / "nope.npz", "missing")
    assert finish(ragged, 30) == 1 and finish(missing, 30) == 1
    assert "same number of rows" in ragged.err_path.read_text()
    assert "data file not found" in missing.err_path.read_text()
    assert query(state, "SELECT * FROM clients") == []


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_client_which_leaves(procs, tmp_path, mlp_artifacts, data, sig, code):
    state = tmp_path / "state"
    port = start_coordinator(procs, mlp_artifacts, state, rounds=1, min_clients=2)   # one client waits forever
    edge = start_edge(procs, port, data[0], "dev0")
    wait_for(lambda: "joined" in edge.out_path.read_text() or edge.poll() is not None, 30, "the client to join")
    time.sleep(0.3)
    edge.send_signal(sig)
    assert finish(edge, 30) == code, edge.err_path.read_text()[-2000:]
    assert f"stopped by {signal.Signals(sig).name}" in edge.err_path.read_text()
    ((active, reason),) = query(state, "SELECT active, left_reason FROM clients")
    assert active == 0 and signal.Signals(sig).name in reason


@pytest.mark.slow
def test_a_signal_during_local_training_stops_at_once(procs, tmp_path, mlp_artifacts, data):
    state = tmp_path / "state"
    port = start_coordinator(procs, mlp_artifacts, state, rounds=1, min_clients=1, local_epochs=2000)  # minutes of work
    edge = start_edge(procs, port, data[0], "dev0")
    wait_for(lambda: query_when_ready(state, "SELECT 1 FROM rounds WHERE round = 1"), 30, "round 1 to open")
    # the round being open is not the client training: it still polls, downloads and caches the vector first (a
    # signal then is "stopped before training"). Its cached vector file is the last thing before training starts;
    # from there, a sub-millisecond step (pruning the cache) precedes the training loop, which the margin covers.
    wait_for(lambda: list((procs.folder / "cache-dev0" / "vectors").glob("*.f32")) or edge.poll() is not None, 60,
             "the client to fetch round 1's vector")
    assert edge.poll() is None, edge.err_path.read_text()[-2000:]
    time.sleep(0.5)
    edge.send_signal(signal.SIGTERM)
    assert finish(edge, 10) == 143        # within 10 s of minutes of training: it stopped at once
    err = edge.err_path.read_text()
    assert "stopped during local training" in err and "stopped by SIGTERM" in err
    assert query(state, "SELECT active FROM clients") == [(0,)]
    assert query(state, "SELECT * FROM submissions") == []


def test_edge_run_help_explains_the_flags():
    out = subprocess.run([*CLI, "edge", "run", "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    for flag in ("--coordinator", "--data", "--cache-dir", "--name", "--client-id", "--config", "--insecure"):
        assert flag in out.stdout
    assert "130 SIGINT, 143 SIGTERM" in out.stdout and "--debug-modules" not in out.stdout


@pytest.mark.slow
def test_out_of_range_labels_stop_the_device_before_training(procs, tmp_path, mlp_artifacts, data):
    state = tmp_path / "state"
    port = start_coordinator(procs, mlp_artifacts, state, rounds=1, min_clients=1)
    shifted = tmp_path / "shifted.npz"
    with np.load(data[0]) as d:
        np.savez(shifted, x=d["x"], labels=d["labels"] + 10)  # labels 10..19 for a 10-class model
    edge = start_edge(procs, port, shifted, "shifted")
    assert finish(edge, 30) == 1
    err = edge.err_path.read_text()
    assert "shifted.npz: array 'labels' holds label 19" in err and "labels must be in 0..9" in err, err
    assert "round 1 fit" not in edge.out_path.read_text()
    assert query(state, "SELECT * FROM submissions") == []
