"""Helpers of the bad-input, fuzz and chaos tests: state snapshots, raw method calls, coordinator processes.

`state_snapshot` is what "a rejected request changes nothing" compares: the database dump
(`StateStore.dump()`) plus every committed global vector file, byte for byte. `open_access()`
are the config overrides that let tests talk plaintext without device tokens (when the
coordinator has those settings at all). `CoordinatorProcess` runs `fedort coordinator serve`
as a subprocess that a test may SIGKILL and restart on the same state dir.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import grpc

from fedort.coordinator import CoordinatorConfig
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc

SERVICE = "/fedort.v1.Coordinator/"
#: (method, request streaming, response streaming, request message class)
METHODS = {
    "Join": (False, False, pb.JoinRequest),
    "DownloadArtifact": (False, True, pb.ArtifactRequest),
    "PollTask": (False, False, pb.PollRequest),
    "DownloadVector": (False, True, pb.VectorRequest),
    "SubmitUpdate": (True, False, pb.UpdatePart),
    "SubmitEvaluation": (False, False, pb.EvaluationResult),
    "Heartbeat": (False, False, pb.HeartbeatRequest),
    "Leave": (False, False, pb.LeaveRequest),
    "Status": (False, False, pb.StatusRequest),
}


def open_access() -> dict:
    """Config overrides for plaintext, token-free test coordinators (only those settings that exist)."""
    fields = {o.key for o in CoordinatorConfig.options()}
    wanted = {"insecure": True, "auth": "open", "submissions_per_minute": 0, "max_streams_per_client": 0}
    return {k: v for k, v in wanted.items() if k in fields}


def open_access_flags() -> list[str]:
    """The same for `fedort coordinator serve` flags."""
    o = open_access()
    return (["--insecure"] if o.get("insecure") else []) + (["--auth", "open"] if "auth" in o else []) + \
        (["--submissions-per-minute", "0"] if "submissions_per_minute" in o else []) + \
        (["--max-streams-per-client", "0"] if "max_streams_per_client" in o else [])


def vector_files(state_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((state_dir / "vectors").glob("round-*.f32"))}


def state_snapshot(coordinator) -> tuple[str, dict[str, bytes], list[str]]:
    """(database dump, committed global vector files, spool file names) of an in-process coordinator."""
    state_dir = coordinator.state_dir
    spool = sorted(str(p.relative_to(state_dir)) for p in (state_dir / "spool").rglob("*") if p.is_file())
    return coordinator.engine.store.dump(), vector_files(state_dir), spool


async def round_one_open(start_coordinator, stub_client, **config):
    """Round 1 open with client-a and client-b joined and client-a's FIT task polled:
    (coordinator, client, model id, the round's vector as client-a downloaded it)."""
    coord = await start_coordinator(**config)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    assert (await client.poll("client-a", model)).kind == pb.Task.FIT
    _, vector = await client.download_vector("client-a", model, 1)
    return coord, client, model, vector


async def cut_off_after_first_chunk(coordinator, client, model: str, vector, chunk: int) -> None:
    """A device that dies mid-upload: header and one chunk sent (and counted by the server), then the
    stream is cancelled; returns once the coordinator's state is back to what it was (or after ~5 s)."""
    import asyncio

    from coordinator_fixtures import chunks_of, update_header, wait_for_metric

    before = state_snapshot(coordinator)
    call = client.stub.SubmitUpdate(timeout=10)
    await call.write(pb.UpdatePart(header=update_header("client-a", model, 1, vector, 10)))
    first = chunks_of(vector, chunk)[0]
    await call.write(pb.UpdatePart(chunk=first))
    # the server has the header and a chunk in hand: the chunk's bytes are counted as received
    await wait_for_metric(coordinator, "fedort_bytes_total", lambda v: v >= len(first), {"direction": "in"})
    call.cancel()
    try:
        await call
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("a cancelled upload call returned")
    for _ in range(250):           # the server notices the reset and removes its temp file
        if state_snapshot(coordinator) == before:
            return
        await asyncio.sleep(0.02)


def integrity_check(state_dir: Path) -> str:
    with sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True, timeout=10) as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0]


def raw_call(channel: grpc.aio.Channel | grpc.Channel, method: str):
    """A multicallable for `method` that sends and returns raw bytes (identity serializers)."""
    req_stream, resp_stream, _ = METHODS[method]
    kind = {(False, False): channel.unary_unary, (False, True): channel.unary_stream,
            (True, False): channel.stream_unary}[(req_stream, resp_stream)]
    return kind(SERVICE + method, request_serializer=None, response_deserializer=None)


# ---- a coordinator subprocess -------------------------------------------------------------------

def serve_command(artifacts: Path, state_dir: Path, port_file: Path, **flags) -> list[str]:
    args = [sys.executable, "-m", "fedort", "coordinator", "serve", "--artifacts", str(artifacts),
            "--state-dir", str(state_dir), "--address", "127.0.0.1:0", "--port-file", str(port_file)]
    for k, v in flags.items():
        args += [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])   # True: a bare switch
    return args + open_access_flags()


def fault_env(fault: str | None, fault_log: Path) -> dict[str, str] | None:
    """The environment of a process armed with fedort.common.faults point `fault` (None: the plain environment)."""
    if fault is None:
        return None
    fault_log.unlink(missing_ok=True)
    return {**os.environ, "FEDORT_FAULT": fault, "FEDORT_FAULT_LOG": str(fault_log)}


def fault_fired(proc: subprocess.Popen, fault_log: Path, log: Path, timeout: float = 60.0) -> str:
    """Wait for a process armed by `fault_env` to kill itself; the point that fired ("NAME@N kill")."""
    assert proc.wait(timeout) == -signal.SIGKILL, f"the process ended with {proc.returncode}, not at its fault point; see {log}"
    assert fault_log.exists(), f"the process was SIGKILLed but no fault point fired; see {log}"
    return fault_log.read_text().strip()


class CoordinatorProcess:
    """One `fedort coordinator serve` process on a state dir; `kill()` SIGKILLs it.

    `fault`: a fedort.common.faults spec (`NAME@N`); the process then kills itself there, and `fault_fired()`
    says which point it died at."""

    def __init__(self, artifacts: Path, state_dir: Path, log: Path, wait_ready: bool = True,
                 fault: str | None = None, **flags) -> None:
        self.port_file = state_dir.parent / f"{state_dir.name}.port"
        self.port_file.unlink(missing_ok=True)
        self.log = log
        self.fault_log = state_dir.parent / f"{state_dir.name}.faults"
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(serve_command(artifacts, state_dir, self.port_file, **flags),
                                         stdout=subprocess.DEVNULL, stderr=err, env=fault_env(fault, self.fault_log))
        self.port: int | None = None
        self.channel: grpc.Channel | None = None
        self.stub: pb_grpc.CoordinatorStub | None = None
        if wait_ready:
            self.wait_ready()

    def wait_ready(self, timeout: float = 30.0) -> bool:
        """Wait for the port file; False if the process ended (or was killed) first."""
        deadline = time.monotonic() + timeout
        while not self.port_file.exists():
            if self.proc.poll() is not None:
                return False
            assert time.monotonic() < deadline, f"coordinator not serving within {timeout} s; see {self.log}"
            time.sleep(0.01)
        self.port = int(self.port_file.read_text())
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = pb_grpc.CoordinatorStub(self.channel)
        return True

    def fault_fired(self, timeout: float = 60.0) -> str:
        """Wait until the process killed itself at its armed fault point; that point ("NAME@N kill")."""
        fired = fault_fired(self.proc, self.fault_log, self.log, timeout)
        if self.channel is not None:
            self.channel.close()
        return fired

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        if self.channel is not None:
            self.channel.close()
