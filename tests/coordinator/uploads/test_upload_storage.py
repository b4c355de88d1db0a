"""Issue 13 (4), upload path: a full disk while spooling is UNAVAILABLE "coordinator storage full",
leaves no temp file and changes nothing; once space returns, the device's retry is accepted.

The spool folder is a real 256 KiB tmpfs filled up by a test file (needs the privilege to mount;
skipped otherwise), so the coordinator meets a genuine ENOSPC from the kernel.
"""

from __future__ import annotations

import subprocess

import grpc
import numpy as np
import pytest

from coordinator_fixtures import mlp_artifacts, start_coordinator, stub_client  # noqa: F401 (fixtures)


@pytest.fixture
def full_spool(tmp_path):
    """state/spool on a tiny tmpfs; yields the filler file that fills it up."""
    spool = tmp_path / "state" / "spool"
    spool.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(spool)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    filler = spool / "filler"
    try:
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        yield filler
    finally:
        subprocess.run(["umount", "-l", str(spool)], capture_output=True)


async def test_a_full_disk_while_spooling_is_unavailable_and_the_retry_succeeds_once_space_returns(
        start_coordinator, stub_client, full_spool, tmp_path):
    # inline_update_bytes=0: the update goes through the spool (a small one kept in its row under FedAvg
    # never touches the spool folder's filesystem)
    coord = await start_coordinator(min_clients=1, rounds=1, state_dir=tmp_path / "state", inline_update_bytes=0)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    task = await client.poll("client-a", model)
    _, g = await client.download_vector("client-a", model, task.round)
    update = (g + np.float32(0.5)).astype(np.float32)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit("client-a", model, task.round, update, 10)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "coordinator storage full" in e.value.details()
    spool = coord.engine.store.spool_dir(task.round)
    assert not spool.exists() or list(spool.iterdir()) == []          # the temp file is gone
    assert coord.engine.store.submissions(task.round) == [] and coord.engine.training.reported == {}

    full_spool.unlink()                                                # space returns
    assert (await client.submit("client-a", model, task.round, update, 10)).accepted


async def test_a_small_update_under_fedavg_is_durable_in_its_row_and_needs_no_spool_space(
        start_coordinator, stub_client, full_spool, tmp_path):
    """FedAvg folds a small (inline) update from memory: no spool file is written, so a full spool
    folder does not stop it (its bytes are durable in its row, which replay rewrites a spool file from)."""
    coord = await start_coordinator(min_clients=1, rounds=2, state_dir=tmp_path / "state")
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    task = await client.poll("client-a", model)
    _, g = await client.download_vector("client-a", model, task.round)
    update = (g + np.float32(0.5)).astype(np.float32)
    assert (await client.submit("client-a", model, task.round, update, 10)).accepted
    spool = coord.engine.store.spool_dir(task.round)
    assert not spool.exists() or [p.name for p in spool.iterdir()] == []
    assert (await client.poll("client-a", model)).round == 2          # round 1 committed the update itself
    assert coord.engine.global_vector.vector.tobytes() == update.tobytes()
