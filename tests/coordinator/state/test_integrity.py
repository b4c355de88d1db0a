"""Corrupt state is detected, named, and never silently served or exported (real coordinators, real files).

A finished two-round run is stopped, a file of its state dir is damaged, and the coordinator is
restarted on it (or `status` is asked about it).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import shutil
import sqlite3

import grpc
import numpy as np
import pytest

from coordinator_fixtures import mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.coordinator import RoundState
from fedort.coordinator.status import offline_status
from fedort.common.errors import CorruptStateError


async def finished_run(start_coordinator, stub_client, rounds: int = 2):
    """A DONE run of `rounds` rounds with two stub clients; returns the stopped coordinator's state dir."""
    coord = await start_coordinator(rounds=rounds)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    for _ in range(rounds):
        await client.fit_round("client-a", model, delta=1.0, num_examples=30)
        await client.fit_round("client-b", model, delta=4.0, num_examples=10)
    outcome = await asyncio.wait_for(coord.wait_done(), 30)
    assert outcome.state is RoundState.DONE
    await coord.stop(grace=0)
    return coord.state_dir


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_re_export_from_a_same_length_wrong_vector_is_refused_naming_the_file(start_coordinator, stub_client):
    state = await finished_run(start_coordinator, stub_client)
    shutil.rmtree(state / "models")                                            # exports lost ...
    shutil.copy(state / "vectors" / "round-0001.f32", state / "vectors" / "round-0002.f32")  # ... and an older vector
    with pytest.raises(CorruptStateError, match=r"round-0002\.f32 hashes to .*the database recorded"):
        await start_coordinator(rounds=2)
    assert not (state / "models" / "round-0001" / "model.onnx").exists()     # no wrong model was written


@pytest.mark.slow
async def test_a_vector_file_of_the_wrong_length_is_corrupt_state_naming_the_file(start_coordinator, stub_client):
    state = await finished_run(start_coordinator, stub_client)
    path = state / "vectors" / "round-0003.f32"
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(CorruptStateError, match=r"round-0003\.f32 holds 9609 elements, expected 9610"):
        await start_coordinator(rounds=2)


@pytest.mark.slow
async def test_a_garbage_model_beside_its_record_is_not_latest_and_is_exported_again(start_coordinator, stub_client,
                                                                                    caplog):
    state = await finished_run(start_coordinator, stub_client)
    model = state / "models" / "round-0002" / "model.onnx"
    model.write_bytes(b"garbage")
    status = offline_status(state)
    assert status.latest_model == ""
    assert f"{model} hashes to" in status.latest_problem
    caplog.set_level(logging.WARNING)
    coord = await start_coordinator(rounds=2)
    assert f"round 2: export not intact ({model} hashes to" in caplog.text
    record = json.loads((model.parent / "model.json").read_text())
    assert record["model_sha256"] == sha(model)
    assert coord.engine.status().latest_model == str(model)


async def test_a_missing_model_is_not_listed_as_latest(start_coordinator, stub_client):
    state = await finished_run(start_coordinator, stub_client)
    model = state / "models" / "round-0002" / "model.onnx"
    model.unlink()
    status = offline_status(state)
    assert status.latest_model == "" and f"{model} is missing" in status.latest_problem


async def test_a_downloaded_older_vector_is_checked_against_its_hash(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=3)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.fit_round("client-a", model, delta=1.0, num_examples=30)
    await client.fit_round("client-b", model, delta=4.0, num_examples=10)
    assert (await client.poll("client-a", model)).round == 2          # round 1 committed: its vector is on disk only
    first = coord.state_dir / "vectors" / "round-0001.f32"
    first.write_bytes(np.full(9610, 7, "<f4").tobytes())
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.download_vector("client-a", model, 1)
    assert err.value.code() == grpc.StatusCode.DATA_LOSS
    assert "round-0001.f32 hashes to" in err.value.details()


async def test_a_spooled_update_with_the_wrong_sha256_stops_the_replay_naming_the_file(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=2, min_clients=2, keep_spool=True)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.fit_round("client-a", model, delta=1.0, num_examples=30)   # acknowledged, round still open
    await coord.stop(grace=0)
    spooled = coord.state_dir / "spool" / "round-0001" / "client-a.f32"
    raw = bytearray(spooled.read_bytes())
    raw[0] ^= 0xFF
    spooled.write_bytes(bytes(raw))
    with pytest.raises(CorruptStateError, match=r"client-a\.f32 hashes to .*the database recorded"):
        await start_coordinator(rounds=2, keep_spool=True)


@pytest.mark.slow
async def test_an_orphan_spool_file_is_removed_on_replay_and_not_counted(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=2)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.fit_round("client-a", model, delta=1.0, num_examples=30)
    await coord.stop(grace=0)
    spool = coord.state_dir / "spool" / "round-0001"
    orphan = spool / "client-b.f32"                     # written but never acknowledged (no row)
    spool.mkdir(parents=True, exist_ok=True)             # (client-a's small update left none: FedAvg folded it)
    orphan.write_bytes(np.zeros(9610, "<f4").tobytes())
    coord = await start_coordinator(rounds=2)
    assert not orphan.exists() and (spool / "client-a.f32").exists()
    con = sqlite3.connect(coord.state_dir / "state.db")
    try:
        assert [r[0] for r in con.execute("SELECT client_id FROM submissions")] == ["client-a"]
    finally:
        con.close()
    assert coord.engine.status().state is RoundState.TRAINING


@pytest.mark.slow
def test_garbage_in_state_db_is_an_error_naming_the_file(tmp_path):
    import subprocess
    import sys

    state = tmp_path / "state"
    state.mkdir()
    (state / "state.db").write_bytes(b"this is not a database" * 100)
    done = subprocess.run([sys.executable, "-m", "fedort", "coordinator", "status", "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"{state / 'state.db'} is not a usable SQLite database" in done.stderr
    assert "Traceback" not in done.stderr
