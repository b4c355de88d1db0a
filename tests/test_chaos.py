"""Chaos on loopback, bounded: a coordinator SIGKILLed again and again, clients dying mid-round,
clients that stop heartbeating. Runs must finish, with exactly the updates that were acknowledged.

Clients here are deterministic protocol clients over the generated stub (threads or asyncio
tasks): an update is a seeded function of (client, round, global vector), so a run's result can
be compared with an uninterrupted run of the same seed, and a death can be placed at an exact
point of the protocol (after the poll, mid-download, mid-upload).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
import numpy as np
import pytest

from chaos_support import CoordinatorProcess, open_access, vector_files
from coordinator_fixtures import (  # noqa: F401
    P_MLP, StubClient, chunks_of, mlp_artifacts, start_coordinator, update_header, wait_for_metric,
)
from fedort.common.clock import ManualClock, use
from fedort.edge_client.client.heartbeat import Heartbeat
from fedort.edge_client.transport.grpc_transport import ChannelConfig, Transport
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.edge_client.client.heartbeat import Heartbeat
from fedort.edge_client.transport.grpc_transport import ChannelConfig, Transport
from fedort.protos.stubs import fedort_v1_pb2 as pb

#: what a client sees when the coordinator dies under a call; anything else is recorded as an error
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}


def local_update(cid: str, round: int, global_vector: np.ndarray) -> np.ndarray:
    """What a deterministic client "trains": 0.9 × the global vector plus its own seeded noise."""
    rng = np.random.default_rng([int(cid[-2:]), round])
    return (0.9 * global_vector + 0.1 * rng.standard_normal(P_MLP)).astype(np.float32)


def query(state: Path, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True, timeout=10) as db:
        return db.execute(sql, args).fetchall()


# ---- a. the coordinator SIGKILLed at random moments ----------------------------------------------

CRASH_CLIENTS = ("client-00", "client-01", "client-02")
CRASH_EXAMPLES = {"client-00": 10, "client-01": 20, "client-02": 30}
CRASH_ROUNDS = 14
KILLS = 12


class Holder:
    """The coordinator process of the moment; clients pick up the newest one after each failure."""

    def __init__(self) -> None:
        self.server: CoordinatorProcess | None = None
        self.finished = threading.Event()


class CrashClient(threading.Thread):
    """Join, then poll → download → submit until DONE, retrying every transport failure."""

    def __init__(self, cid: str, holder: Holder, model_hint: list[str]) -> None:
        super().__init__(name=cid, daemon=True)
        self.cid, self.holder, self.model = cid, holder, model_hint
        self.acks: list[tuple[int, bool]] = []     # (round, duplicate) of every accepted reply
        self.stale: list[int] = []                 # rounds whose update was never acknowledged (round closed)
        self.pending: tuple[int, list[pb.UpdatePart]] | None = None   # sent, not yet acknowledged
        self.errors: list[str] = []
        self.done = False

    def run(self) -> None:
        joined = False
        deadline = time.monotonic() + 100
        while not self.done and time.monotonic() < deadline and not self.holder.finished.is_set():
            server = self.holder.server
            stub = server.stub if server is not None else None
            if stub is None:
                time.sleep(0.02)
                continue
            try:
                if not joined:
                    self.model[0] = stub.Join(pb.JoinRequest(client_id=self.cid), timeout=5).model_id
                    joined = True
                self.step(stub, self.model[0])
            except grpc.RpcError as e:
                if e.code() not in RETRYABLE:
                    self.errors.append(f"{e.code().name}: {e.details()}")
                time.sleep(0.02)
            except ValueError:        # "Cannot invoke RPC on closed channel!": the process was just killed
                time.sleep(0.02)

    def step(self, stub, model: str) -> None:
        if self.pending is not None:      # like the edge client: re-send until acknowledged (or the round closed)
            round, parts = self.pending
            try:
                reply = stub.SubmitUpdate(iter(parts), timeout=5)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    raise
                self.stale.append(round)
            else:
                assert reply.accepted
                self.acks.append((round, reply.duplicate))
            self.pending = None
        task = stub.PollTask(pb.PollRequest(client_id=self.cid, model_id=model, wait_ms=1000), timeout=5)
        if task.kind == pb.Task.DONE:
            self.done = True
        elif task.kind == pb.Task.FIT:
            parts = list(stub.DownloadVector(pb.VectorRequest(client_id=self.cid, model_id=model, round=task.round),
                                             timeout=5))
            vector = np.frombuffer(b"".join(p.chunk for p in parts[1:]), dtype="<f4")
            update = local_update(self.cid, task.round, vector)
            header = update_header(self.cid, model, task.round, update, CRASH_EXAMPLES[self.cid],
                                   trained_from=task.vector_sha256)
            self.pending = (task.round, [pb.UpdatePart(header=header)]
                            + [pb.UpdatePart(chunk=c) for c in chunks_of(update, 8192)])
            self.step(stub, model)


def kill_plan(rng: np.random.Generator, kills: int) -> list[tuple[str, float, int]]:
    """Seeded kill moments: a quarter during start-up (`delay` s after spawn: recovery, redone
    exports), the rest once `threshold` distinct updates were acknowledged, + `delay` s (mid-upload,
    mid-commit, mid-export, mid-poll...), spread over the run but for its last four rounds (head room:
    a kill may be pushed past its threshold by a burst of acks, and rounds are fast)."""
    starting = kills // 4
    thresholds = sorted(rng.choice(np.arange(1, 3 * CRASH_ROUNDS - 12), size=kills - starting, replace=False))
    plan = [("serving", float(rng.uniform(0, 0.02)), int(t)) for t in thresholds]
    for _ in range(starting):
        plan.insert(int(rng.integers(len(plan) + 1)), ("starting", float(rng.uniform(0.05, 0.3)), 0))
    return plan


def crash_run(artifacts: Path, state: Path, log: Path, kills: int, seed: int) -> tuple[list[CrashClient], list[str]]:
    """One run of CRASH_ROUNDS rounds; the coordinator is SIGKILLed `kills` times at seeded moments.

    Returns the clients and, per kill, where it struck: "starting" (before the port file) or
    "serving after N acks" (N distinct acknowledged updates so far).
    """
    holder, model = Holder(), [""]
    flags = dict(rounds=CRASH_ROUNDS, min_clients=3, round_timeout=60, client_timeout=0)
    clients = [CrashClient(c, holder, model) for c in CRASH_CLIENTS]
    acked = lambda: len({(r, c.cid) for c in clients for r, _ in list(c.acks)})  # noqa: E731
    killed: list[str] = []
    last = 0     # acks at the previous serving kill: each serving kill waits for a new ack, so a burst
    try:         # of acks (a round's three clients at once) cannot fold two kills onto one point
        for c in clients:
            c.start()
        for when, delay, threshold in kill_plan(np.random.default_rng(seed), kills):
            server = CoordinatorProcess(artifacts, state, log, wait_ready=(when == "serving"), **flags)
            if when == "serving":
                holder.server = server
                deadline = time.monotonic() + 30
                threshold = max(threshold, last + 1)
                while acked() < threshold and server.proc.poll() is None:
                    assert time.monotonic() < deadline, f"no progress to {threshold} acks; see {log}"
                    time.sleep(0.002)
            time.sleep(delay)
            if server.proc.poll() is not None:      # the run finished before this kill
                assert server.proc.returncode == 0, f"coordinator failed; see {log}"
                break
            n = acked()
            server.kill()
            holder.server = None
            killed.append(f"serving after {n} acks" if server.port is not None else "starting")
            last = n if when == "serving" else last
        if all(c.done for c in clients):
            return clients, killed
        server = CoordinatorProcess(artifacts, state, log, **flags)
        holder.server = server
        for c in clients:
            c.join(60)
        assert server.proc.wait(30) == 0, f"coordinator failed; see {log}"
        return clients, killed
    finally:
        holder.finished.set()
        if holder.server is not None:
            holder.server.kill()
        for c in clients:
            c.join(10)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_coordinator_sigkilled_at_random_moments_matches_an_uninterrupted_run(mlp_artifacts, tmp_path):
    reference, _ = crash_run(mlp_artifacts, tmp_path / "reference", tmp_path / "reference.log", kills=0, seed=0)
    assert all(c.done and not c.errors for c in reference)
    clients, killed = crash_run(mlp_artifacts, tmp_path / "crashed", tmp_path / "crashed.log", kills=KILLS, seed=6)
    assert len(killed) >= 10, f"the run ended after only {len(killed)} kills: {killed}"
    serving = [k for k in killed if k.startswith("serving")]
    assert len(serving) >= 5 and len(set(serving)) >= 4, killed    # most strike mid-run, at different points
    for c in clients:
        assert c.done and not c.errors, (c.cid, c.errors)

    final = f"round-{CRASH_ROUNDS + 1:04d}.f32"
    got = np.frombuffer(vector_files(tmp_path / "crashed")[final], dtype="<f4")
    want = np.frombuffer(vector_files(tmp_path / "reference")[final], dtype="<f4")
    np.testing.assert_allclose(got, want, atol=1e-6)

    # every acknowledged update counted exactly once: the submissions table is exactly the acked set,
    # a fresh (non-duplicate) acceptance happened at most once per client and round, and each
    # committed round counts all three updates with their examples
    state = tmp_path / "crashed"
    rows = query(state, "SELECT round, client_id, num_examples FROM submissions")
    assert Counter((r, c) for r, c, _ in rows) == Counter({(r, c): 1 for r in range(1, CRASH_ROUNDS + 1)
                                                          for c in CRASH_CLIENTS})
    for c in clients:
        # an update made durable just before a kill may never be acknowledged: the client re-sends it
        # (a duplicate ack) unless the round closed meanwhile (its re-send is then stale)
        assert {r for r, _ in c.acks} | set(c.stale) == set(range(1, CRASH_ROUNDS + 1)), (c.cid, c.acks, c.stale)
        assert not {r for r, _ in c.acks} & set(c.stale)
        fresh = Counter(r for r, dup in c.acks if not dup)
        assert all(n <= 1 for n in fresh.values()), (c.cid, c.acks)
    assert all(n == CRASH_EXAMPLES[c] for _, c, n in rows)
    assert query(state, "SELECT round, state, clients, examples FROM rounds ORDER BY round") == \
        [(r, "EXPORTED", 3, 60) for r in range(1, CRASH_ROUNDS + 1)]


# ---- b. 30 % of the clients die mid-round, every round --------------------------------------------

N_CLIENTS, DOOMED_PER_ROUND, CHAOS_ROUNDS, CHUNK = 10, 3, 4, 8192
PHASES = ("after poll", "mid-download", "mid-upload")


async def chaos_client(port: int, cid: str, doomed: dict[int, str], rejoin_at_once: set[int], engine,
                       log: list[tuple[int, str, str]]) -> None:
    """A client that dies at `doomed[round]` (closing its connection) and then joins again: at once
    in rounds of `rejoin_at_once` (finishing the round), else once the round is over."""
    client = StubClient(port)
    try:
        model = (await client.join(cid)).model_id
        while True:
            task = await client.poll(cid, model, wait_ms=1000)
            if task.kind == pb.Task.DONE:
                return
            if task.kind != pb.Task.FIT:
                continue
            r = task.round
            phase = doomed.pop(r, None)
            if phase is None:
                _, vector = await client.download_vector(cid, model, r)
                update = local_update(cid, r, vector)
                reply = await client.submit(cid, model, r, update, 10, chunks=chunks_of(update, CHUNK))
                log.append((r, cid, "duplicate" if reply.duplicate else "accepted"))
                continue
            if phase in ("mid-download", "mid-upload"):
                stream = client.stub.DownloadVector(pb.VectorRequest(client_id=cid, model_id=model, round=r), timeout=5)
                parts = [await stream.read()]                 # the header and no more, or ...
                if phase == "mid-upload":                      # ... all of it, then half an upload
                    while (part := await stream.read()) is not grpc.aio.EOF:
                        parts.append(part)
                    vector = np.frombuffer(b"".join(p.chunk for p in parts[1:]), dtype="<f4")
                    update = local_update(cid, r, vector)
                    call = client.stub.SubmitUpdate(timeout=5)
                    await call.write(pb.UpdatePart(header=update_header(cid, model, r, update, 10,
                                                                        trained_from=task.vector_sha256)))
                    await call.write(pb.UpdatePart(chunk=chunks_of(update, CHUNK)[0]))
                    await asyncio.sleep(0.05)
            await client.close()                              # the device is gone: connection reset
            log.append((r, cid, f"died {phase}"))
            if r not in rejoin_at_once:
                while engine.round == r and engine.state.name in ("TRAINING", "AGGREGATING", "EXPORTING"):
                    await asyncio.sleep(0.05)
            client = StubClient(port)                         # a new process of the same device
            assert (await client.join(cid)).model_id == model
    finally:
        await client.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_thirty_percent_of_clients_die_mid_round_every_round_and_the_run_finishes(start_coordinator):
    coord = await start_coordinator(rounds=CHAOS_ROUNDS, min_clients=5, min_available_clients=N_CLIENTS, fraction=1.0,
                                    round_timeout_s=2.0, max_round_attempts=2, max_chunk_bytes=CHUNK, **open_access())
    rng = np.random.default_rng(30)
    cids = [f"client-{i:02d}" for i in range(N_CLIENTS)]
    doomed: dict[str, dict[int, str]] = {c: {} for c in cids}
    for r in range(1, CHAOS_ROUNDS + 1):
        for c in rng.choice(cids, DOOMED_PER_ROUND, replace=False):
            doomed[str(c)][r] = PHASES[int(rng.integers(len(PHASES)))]
    rejoin_at_once = {2, 4}            # even rounds: the dead come back and finish it; odd: the deadline closes it
    log: list[tuple[int, str, str]] = []
    tasks = [asyncio.create_task(chaos_client(coord.port, c, dict(doomed[c]), rejoin_at_once, coord.engine, log))
             for c in cids]
    outcome = await asyncio.wait_for(coord.wait_done(), 60)
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    assert outcome.state.name == "DONE" and outcome.rounds_completed == CHAOS_ROUNDS, outcome

    state = coord.state_dir
    for r in range(1, CHAOS_ROUNDS + 1):
        died = {c for rr, c, what in log if rr == r and what.startswith("died")}
        assert len(died) == DOOMED_PER_ROUND
        counted = {c for (c,) in query(state, "SELECT client_id FROM submissions WHERE round = ?", r)}
        if r in rejoin_at_once:        # closed early: every selected client reported, the dead after rejoining
            assert counted == set(cids), r
        else:                          # closed at the deadline by quorum of the survivors
            assert counted == set(cids) - died, r
    rows = query(state, "SELECT round, state, attempt, clients FROM rounds ORDER BY round")
    assert rows == [(r, "EXPORTED", 1, N_CLIENTS if r in rejoin_at_once else N_CLIENTS - DOOMED_PER_ROUND)
                    for r in range(1, CHAOS_ROUNDS + 1)]
    assert not list((state / "spool").rglob("*.tmp")), "a cut-off upload left a temp file"


# ---- c. heartbeats ----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_clients_that_stop_heartbeating_are_dropped_from_selection_and_rejoin_cleanly(start_coordinator):
    with use(ManualClock()) as clock:   # the registry's liveness timeout runs on a clock the test moves
        await _heartbeats_keep_clients_selectable(start_coordinator, clock)


async def _heartbeats_keep_clients_selectable(start_coordinator, clock: ManualClock) -> None:
    timeout = 1.0
    coord = await start_coordinator(rounds=3, min_clients=2, fraction=1.0, client_timeout_s=timeout,
                                    round_timeout_s=30, **open_access())
    state = coord.state_dir
    a, b, c = "client-00", "client-01", "client-02"
    client = StubClient(coord.port)
    transports = [Transport(ChannelConfig(f"127.0.0.1:{coord.port}", insecure=True)) for _ in range(3)]
    try:
        model = (await client.join(c)).model_id       # c joins, then goes silent: no heartbeat, no call
        clock.advance(timeout + 0.3)
        with Heartbeat(transports[0], a, 0.2), Heartbeat(transports[1], b, 0.2):
            await client.join(a)
            await client.join(b)
            for cid in (a, b):
                await fit(client, cid, model, 1)
            # round 2 opened right away: c, silent for longer than client_timeout_s, is not selected
            assert await selected(state, 2) == [a, b]
            assert (await client.poll(c, model, wait_ms=0)).kind == pb.Task.WAIT
            assert (await client.join(c)).client_id == c   # c comes back (same identity) during round 2 ...
            with Heartbeat(transports[2], c, 0.2):          # ... and heartbeats from now on
                await fit(client, a, model, 2)
                clock.advance(timeout + 0.5)          # a, b and c make no call now, but their heartbeats go on:
                await until_available(coord, {a, b, c})   # each heartbeat since makes its client available again
                await fit(client, b, model, 2)        # round 2 closes; round 3 opens
                assert await selected(state, 3) == [a, b, c]   # a and c kept by heartbeats alone; c is back
                for cid in (c, a, b):
                    await fit(client, cid, model, 3)
        outcome = await asyncio.wait_for(coord.wait_done(), 20)
        assert outcome.state.name == "DONE"
        assert query(state, "SELECT round, clients FROM rounds ORDER BY round") == [(1, 2), (2, 2), (3, 3)]
        assert {cid for (cid,) in query(state, "SELECT client_id FROM submissions WHERE round = 3")} == {a, b, c}
    finally:
        await client.close()
        for t in transports:
            t.close()


async def fit(client: StubClient, cid: str, model: str, round: int) -> None:
    task = await client.poll(cid, model, wait_ms=5000)
    assert (task.kind, task.round) == (pb.Task.FIT, round), (cid, task)
    _, vector = await client.download_vector(cid, model, round)
    update = local_update(cid, round, vector)
    assert (await client.submit(cid, model, round, update, 10)).accepted


async def until_available(coord, clients: set[str]) -> None:
    for _ in range(500):
        if set(coord.engine.registry.available()) >= clients:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{sorted(clients)} did not all become available: {coord.engine.registry.available()}")


async def selected(state: Path, round: int) -> list[str]:
    for _ in range(200):
        rows = query(state, "SELECT selected FROM rounds WHERE round = ?", round)
        if rows:
            return json.loads(rows[0][0])
        await asyncio.sleep(0.02)
    raise AssertionError(f"round {round} did not open")


# ---- d. stalled uploads ------------------------------------------------------------------------------

@pytest.mark.timeout(60)
async def test_stalled_uploads_do_not_block_other_clients(start_coordinator):
    coord = await start_coordinator(min_clients=6, max_chunk_bytes=CHUNK, round_timeout_s=60, stream_idle_timeout_s=1.0,
                                    **open_access())
    cids = [f"client-{i:02d}" for i in range(6)]
    honest = StubClient(coord.port)
    stalled: list[tuple[StubClient, object]] = []
    try:
        model = [(await honest.join(c)).model_id for c in cids][0]
        assert (await honest.poll(cids[0], model)).kind == pb.Task.FIT
        _, vector = await honest.download_vector(cids[0], model, 1)
        for cid in cids[:4]:              # live connections that send a header and a chunk, then nothing
            peer = StubClient(coord.port)
            call = peer.stub.SubmitUpdate()   # no deadline: the server must bound it
            await call.write(pb.UpdatePart(header=update_header(cid, model, 1, vector, 10)))
            await call.write(pb.UpdatePart(chunk=chunks_of(vector, CHUNK)[0]))
            stalled.append((peer, call))
        await wait_for_metric(coord, "fedort_upload_slots_in_use", lambda v: v == 4)   # the stalled hold every slot
        reply = await asyncio.wait_for(honest.submit(cids[5], model, 1, vector, 10, chunks=chunks_of(vector, CHUNK)), 4)
        assert reply.accepted
    finally:
        for peer, call in stalled:
            call.cancel()
            await peer.close()
        await honest.close()
