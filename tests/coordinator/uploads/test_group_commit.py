"""Group commit of arrivals: updates that arrive together are made durable by one commit, every one of
them survives a SIGKILL right after its acknowledgement, and a group that fails acknowledges none.

`commit_delay_ms` makes the grouping certain: a group waits (bounded) until it holds every update
the round still waits for, so the four concurrent uploads below always share one commit."""

from __future__ import annotations

import asyncio
import hashlib
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest

from coordinator_fixtures import (chunks_of, mlp_artifacts, start_coordinator, stub_client,  # noqa: F401
                                  update_header, wait_for_metric)
from fedort.coordinator.state.store import StateStore
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc

CLIENTS = ("client-0000", "client-0001", "client-0002", "client-0003")
LATE = "client-0099"
EXAMPLES = {c: 10 * (i + 1) for i, c in enumerate((*CLIENTS, LATE))}
GROUPED = dict(min_clients=len(CLIENTS), rounds=2, commit_delay_ms=30_000)


def update_of(cid: str, global_vector: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(int(cid[-4:]))
    return (0.5 * global_vector + rng.standard_normal(global_vector.shape[0])).astype(np.float32)


def rows(state_dir: Path, round: int) -> dict[str, str]:
    """client id -> sha256 of every durable submission of `round`."""
    return {s.client_id: s.sha256 for s in submissions(state_dir, round)}


def submissions(state_dir: Path, round: int):
    store = StateStore(state_dir, readonly=True)
    try:
        return store.submissions(round)
    finally:
        store.close()


async def ready_clients(coordinator, stub_client) -> tuple[object, str, np.ndarray]:
    client = stub_client(coordinator.port)
    model = (await client.join(CLIENTS[0])).model_id
    for cid in CLIENTS[1:]:
        await client.join(cid)
    for cid in CLIENTS:
        assert (await client.poll(cid, model)).kind == pb.Task.FIT
    _, vector = await client.download_vector(CLIENTS[0], model, 1)
    return client, model, vector


@pytest.mark.slow
async def test_updates_arriving_together_share_one_group_commit(start_coordinator, stub_client, tmp_path):
    coordinator = await start_coordinator(**GROUPED)
    client, model, vector = await ready_clients(coordinator, stub_client)
    replies = await asyncio.gather(*(client.submit(c, model, 1, update_of(c, vector), EXAMPLES[c]) for c in CLIENTS))
    assert all(r.accepted and not r.duplicate for r in replies)
    registry = coordinator.monitoring.registry
    assert registry.get_sample_value("fedort_group_commits_total") == 1
    assert registry.get_sample_value("fedort_updates_total", {"result": "accepted", "reason": ""}) == len(CLIENTS)


@pytest.mark.slow
async def test_a_failed_group_commit_acknowledges_none_of_its_members(start_coordinator, stub_client, tmp_path):
    coordinator = await start_coordinator(**GROUPED)
    client, model, vector = await ready_clients(coordinator, stub_client)
    db = sqlite3.connect(tmp_path / "state" / "state.db", isolation_level=None)
    try:   # a real SQLite failure inside the group's transaction: one member's row is refused
        db.execute("CREATE TRIGGER refuse BEFORE INSERT ON submissions WHEN NEW.client_id = 'client-0002' "
                   "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
        outcomes = await asyncio.gather(*(client.submit(c, model, 1, update_of(c, vector), EXAMPLES[c])
                                          for c in CLIENTS), return_exceptions=True)
        assert all(isinstance(o, grpc.aio.AioRpcError) for o in outcomes), outcomes
        assert {o.code() for o in outcomes} == {grpc.StatusCode.INTERNAL}
        assert rows(tmp_path / "state", 1) == {}
        assert coordinator.monitoring.registry.get_sample_value("fedort_group_commits_total") == 0
        db.execute("DROP TRIGGER refuse")
    finally:
        db.close()
    # nothing was counted, so the same updates are accepted (not duplicates) when sent again
    replies = await asyncio.gather(*(client.submit(c, model, 1, update_of(c, vector), EXAMPLES[c]) for c in CLIENTS))
    assert all(r.accepted and not r.duplicate for r in replies)
    await wait_for_metric(coordinator, "fedort_rounds_committed_total", lambda v: v >= 1)


# ---- a real coordinator process, SIGKILLed right after the acknowledgements -----------------------

class Server:
    def __init__(self, artifacts: Path, state_dir: Path, tmp: Path, inline_update_bytes: int) -> None:
        config = tmp / "grouped.toml"
        config.write_text(f"[coordinator]\ncommit_delay_ms = 3000\ninline_update_bytes = {inline_update_bytes}\n")
        port_file = tmp / "port"
        port_file.unlink(missing_ok=True)
        fedort = Path(sys.executable).with_name("fedort")
        self.proc = subprocess.Popen(
            [str(fedort), "coordinator", "serve", "--config", str(config), "--artifacts", str(artifacts),
             "--state-dir", str(state_dir), "--address", "127.0.0.1:0", "--port-file", str(port_file),
             "--rounds", "2", "--min-clients", str(len(CLIENTS) + 1), "--round-timeout-s", "60", "--client-timeout-s", "0",
             "--insecure", "--auth", "open"],
            stdout=subprocess.DEVNULL, stderr=open(tmp / "coordinator.log", "ab"))
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert self.proc.poll() is None, f"coordinator exited early; see {tmp / 'coordinator.log'}"
            assert time.monotonic() < deadline, "coordinator did not write its port file within 30 s"
            time.sleep(0.02)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{int(port_file.read_text())}")
        self.stub = pb_grpc.CoordinatorStub(self.channel)

    def stop(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def server_process(mlp_artifacts, tmp_path):
    started: list[Server] = []

    def start(state_dir: Path, inline_update_bytes: int) -> Server:
        started.append(Server(mlp_artifacts, state_dir, tmp_path, inline_update_bytes))
        return started[-1]

    yield start
    for s in started:
        s.stop()


@pytest.mark.slow
@pytest.mark.parametrize("inline", [True, False], ids=["bytes-in-row", "fsynced-spool-file"])
def test_updates_acknowledged_in_one_group_commit_all_survive_a_sigkill_right_after_their_acks(server_process,
                                                                                                tmp_path, inline):
    state = tmp_path / "state"
    limit = 1 << 20 if inline else 0   # the MLP's updates (38 KB) travel inside their rows, or only in spool files
    server = server_process(state, limit)
    # LATE is selected too and reports only after the restart: round 1 cannot commit (and drop the
    # acknowledged bytes) before the SIGKILL
    model = [server.stub.Join(pb.JoinRequest(client_id=c), timeout=10) for c in (*CLIENTS, LATE)][0].model_id
    for cid in CLIENTS:
        task = server.stub.PollTask(pb.PollRequest(client_id=cid, model_id=model, wait_ms=10_000), timeout=20)
        assert (task.kind, task.round) == (pb.Task.FIT, 1)
    parts = list(server.stub.DownloadVector(pb.VectorRequest(client_id=CLIENTS[0], model_id=model, round=1),
                                            timeout=10))
    initial = np.frombuffer(b"".join(p.chunk for p in parts[1:]), dtype="<f4")
    updates = {c: update_of(c, initial) for c in CLIENTS}

    def submit(cid: str) -> pb.SubmitReply:
        header = update_header(cid, model, 1, updates[cid], EXAMPLES[cid], trained_from=parts[0].header.sha256)
        return server.stub.SubmitUpdate(iter([pb.UpdatePart(header=header)] +
                                             [pb.UpdatePart(chunk=c) for c in chunks_of(updates[cid])]), timeout=60)

    with ThreadPoolExecutor(len(CLIENTS)) as pool:
        replies = list(pool.map(submit, CLIENTS))
    server.proc.send_signal(signal.SIGKILL)          # right after the last acknowledgement
    server.proc.wait(10)
    assert all(r.accepted and not r.duplicate for r in replies)

    durable = rows(state, 1)                          # every acknowledged update: its row and its bytes
    assert durable == {c: hashlib.sha256(u.tobytes()).hexdigest() for c, u in updates.items()}
    spool = state / "spool" / "round-0001"
    if inline:
        assert {s.client_id: s.payload for s in submissions(state, 1)} == {c: u.tobytes() for c, u in updates.items()}
        # their spool files were never fsynced (FedAvg folds from memory: none may have been written at
        # all): stand for what a power cut may leave of them
        spool.mkdir(parents=True, exist_ok=True)
        (spool / f"{CLIENTS[0]}.f32").unlink(missing_ok=True)
        (spool / f"{CLIENTS[1]}.f32").write_bytes(b"")
        (spool / f"{CLIENTS[2]}.f32").write_bytes(updates[CLIENTS[2]].tobytes()[:1000])
    else:
        for cid, u in updates.items():
            assert (spool / f"{cid}.f32").read_bytes() == u.tobytes()

    server.stop()
    server = server_process(state, limit)             # the restart replays them once: with LATE's, round 1 commits
    task = server.stub.PollTask(pb.PollRequest(client_id=LATE, model_id=model, wait_ms=10_000), timeout=20)
    assert (task.kind, task.round) == (pb.Task.FIT, 1)
    updates[LATE] = update_of(LATE, initial)
    assert submit(LATE).accepted
    for cid in CLIENTS:
        task = server.stub.PollTask(pb.PollRequest(client_id=cid, model_id=model, wait_ms=10_000), timeout=20)
        assert (task.kind, task.round) == (pb.Task.FIT, 2)
    committed = np.fromfile(state / "vectors" / "round-0002.f32", dtype="<f4")
    total = sum(EXAMPLES[c] * updates[c].astype(np.float64) for c in (*CLIENTS, LATE))
    np.testing.assert_allclose(committed, (total / sum(EXAMPLES.values())).astype(np.float32), atol=1e-6)
    assert all(s.payload is None for s in submissions(state, 1))   # a committed round keeps no update bytes
