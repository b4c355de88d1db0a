"""A full disk under a running coordinator: honest errors, token checks from memory, and recovery
when space returns. The state dir lives on a small tmpfs mounted for the test (needs root or
CAP_SYS_ADMIN; skipped, naming what is missing, otherwise)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest

from coordinator_fixtures import (  # noqa: F401
    manual_clock, mlp_artifacts, pass_the_deadline, start_coordinator, stub_client, wait_for_metric,
)
from fedort.coordinator import RoundState
from fedort.coordinator.rpc.devices import DeviceStore
from fedort.coordinator.state.store import StateStore
from fedort.edge_client.transport.grpc_transport import Transport
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.common.errors import StorageError


@pytest.fixture
def small_disk(tmp_path):
    """A 32 MiB tmpfs at tmp_path/disk; `fill()` takes every free byte, `free()` gives them back."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root or CAP_SYS_ADMIN): {done.stderr.strip()}")

    class Disk:
        path = mount
        filler = mount / "filler"

        def fill(self) -> None:
            block = b"\0" * (1 << 16)
            with open(self.filler, "ab", buffering=0) as f:
                for size in (1 << 16, 4096, 512, 1):
                    block = b"\0" * size
                    try:
                        while True:
                            f.write(block)
                    except OSError as e:
                        assert e.errno == errno.ENOSPC, e

        def free(self) -> None:
            self.filler.unlink(missing_ok=True)

    yield Disk()
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_transaction_on_a_full_disk_is_a_storage_error_and_the_store_stays_usable(small_disk):
    store = StateStore(small_disk.path / "state")
    try:
        small_disk.fill()
        with pytest.raises(StorageError, match="coordinator storage full"):
            store.set_meta(note="x" * (1 << 20))        # not "cannot rollback - no transaction is active"
        small_disk.free()
        store.set_meta(note="fits again")
        assert store.get_meta("note") == "fits again"
    finally:
        store.close()


async def test_device_tokens_are_checked_from_memory_while_the_disk_is_full(small_disk, start_coordinator):
    state = small_disk.path / "state"
    tokens = [DeviceStore(state).enroll(name)[1] for name in ("dev-a", "dev-b")]
    coord = await start_coordinator(auth="token", state_dir=state, rounds=1)
    address = f"127.0.0.1:{coord.port}"

    def join_both_and_wait_for_the_round(model_id: str = "") -> None:
        for token, cid in zip(tokens, ("dev-a", "dev-b")):
            with Transport.connect(address, insecure=True, token=token, rpc_timeout_s=10) as t:
                model_id = t.join(cid, cid).model_id
        with Transport.connect(address, insecure=True, token=tokens[0], rpc_timeout_s=10) as t:
            assert t.poll("dev-a", model_id, 10_000).kind.name == "FIT"

    await asyncio.to_thread(join_both_and_wait_for_the_round)      # while there is space
    small_disk.fill()
    with Transport.connect(address, insecure=True, token=tokens[0], rpc_timeout_s=10) as t:
        _, state_name = await asyncio.to_thread(t.heartbeat, "dev-a")
    assert state_name is RoundState.TRAINING


async def test_an_upload_on_a_full_disk_is_unavailable_and_is_accepted_once_space_returns(small_disk, start_coordinator,
                                                                                        stub_client):
    coord = await start_coordinator(state_dir=small_disk.path / "state", rounds=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    task = await client.poll("client-a", model)
    _, vector = await client.download_vector("client-a", model, task.round)
    small_disk.fill()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.submit("client-a", model, 1, vector + 1, 10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert err.value.details().startswith("coordinator storage full")
    assert coord.monitoring.registry.get_sample_value("fedort_storage_errors_total") == 1
    small_disk.free()
    assert (await client.submit("client-a", model, 1, vector + 1, 10)).accepted
    await client.fit_round("client-b", model, delta=3.0, num_examples=10)
    outcome = await asyncio.wait_for(coord.wait_done(), 30)
    assert outcome.state is RoundState.DONE


def fedort(*args: str) -> list[str]:
    exe = Path(sys.executable).with_name("fedort")
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "fedort", *args]


@pytest.mark.slow
async def test_an_edge_client_exits_non_zero_when_the_run_failed(start_coordinator, stub_client, tmp_path, manual_clock):
    coord = await start_coordinator(rounds=1, min_clients=2, round_timeout_s=600, max_round_attempts=1)
    idle = stub_client(coord.port)
    await idle.join("idle")                        # selected, never submits: the round fails at its deadline
    data = tmp_path / "client.npz"
    rng = np.random.default_rng(0)
    np.savez(data, x=rng.random((40, 64), dtype=np.float32), labels=rng.integers(0, 10, 40))
    proc = await asyncio.create_subprocess_exec(
        *fedort("edge", "run", "--coordinator", f"127.0.0.1:{coord.port}", "--insecure", "--data", str(data),
                "--cache-dir", str(tmp_path / "cache"), "--name", "dev", "--poll-wait-ms", "1000"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    communicating = asyncio.ensure_future(proc.communicate())
    for _ in range(3000):                          # until the device's update is in: then the deadline passes
        if coord.engine.training is not None and len(coord.engine.training.reported) == 1:
            break
        await asyncio.sleep(0.02)
    await pass_the_deadline(coord, manual_clock)
    out, err = await asyncio.wait_for(communicating, 120)
    outcome = await asyncio.wait_for(coord.wait_done(), 60)
    assert outcome.state is RoundState.FAILED
    assert proc.returncode == 1, (out.decode(), err.decode())
    assert "the coordinator ended the run FAILED" in err.decode()
    assert "done:" not in out.decode()
    assert (out + err).decode().count("round 1 fit:") == 1        # each round once, not also in the log


@pytest.mark.slow
async def test_the_round_engine_waits_for_space_at_commit_and_finishes_when_it_returns(small_disk, start_coordinator,
                                                                                     stub_client):
    # three selected, two report: the round closes at its deadline, after the disk was filled
    coord = await start_coordinator(state_dir=small_disk.path / "state", rounds=1, min_clients=2, round_timeout_s=8,
                                    min_available_clients=3)   # the round opens with all three joined
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.join("client-c")                       # selected, never reports
    await client.fit_round("client-a", model, delta=1.0, num_examples=10)
    await client.fit_round("client-b", model, delta=3.0, num_examples=10)
    small_disk.fill()
    await wait_for_metric(coord, "fedort_storage_errors_total", lambda v: v >= 1, timeout=60)  # commit is waiting
    assert coord.engine.outcome is None                  # ... not failed
    small_disk.free()
    outcome = await asyncio.wait_for(coord.wait_done(), 60)
    assert outcome.state is RoundState.DONE and outcome.rounds_completed == 1


@pytest.mark.slow
async def test_status_shows_the_storage_full_condition(small_disk, start_coordinator):
    coord = await start_coordinator(state_dir=small_disk.path / "state", rounds=1)

    def status(*flags: str) -> str:
        done = subprocess.run(fedort("coordinator", "status", "--state-dir", str(coord.state_dir), *flags),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "storage    FULL" not in status()
    small_disk.fill()
    assert "storage    FULL: 0 bytes free" in status()
    assert json.loads(status("--json"))["storage_full"] is True
    small_disk.free()
    assert json.loads(status("--json"))["storage_full"] is False


@pytest.mark.slow
async def test_the_run_end_waits_for_space_and_ends_done_when_it_returns(small_disk, start_coordinator, stub_client):
    # the final evaluation's summary and the run's DONE are the last writes: a full disk there is waited out too
    coord = await start_coordinator(state_dir=small_disk.path / "state", rounds=1, fraction_evaluate=1.0,
                                    round_timeout_s=3)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.fit_round("client-a", model, 1.0, 10)
    await client.fit_round("client-b", model, 3.0, 10)
    assert (await client.poll("client-a", model)).kind == pb.Task.EVALUATE   # round 1 committed and exported
    small_disk.fill()                                    # nobody evaluates: the phase ends at its deadline
    await wait_for_metric(coord, "fedort_storage_errors_total", lambda v: v >= 1, timeout=60)
    assert coord.engine.outcome is None                  # waiting for space, not failed
    small_disk.free()
    outcome = await asyncio.wait_for(coord.wait_done(), 60)
    assert outcome.state is RoundState.DONE and outcome.rounds_completed == 1
    assert coord.engine.store.get_meta("run_state") == "DONE"
