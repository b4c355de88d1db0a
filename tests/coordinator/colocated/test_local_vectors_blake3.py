"""Protocol 1.5: FIT tasks carry the global vector's BLAKE3 for co-located devices (Task.vector_blake3).

A coordinator with a local vector dir puts the BLAKE3 of the round's global vector in every FIT
task, next to its sha256; a device reading the published file checks it with that digest (faster)
and with sha256 only when the task has none (an older coordinator). sha256 still names the vector.
"""

from __future__ import annotations

import asyncio
import hashlib

import numpy as np
import pytest

from coordinator_fixtures import mlp_artifacts, opened_round, start_coordinator, stub_client  # noqa: F401 (fixtures)
from fedort.edge_client.uploads.local_vectors import LocalVectors
from fedort.common import digests

blake3 = pytest.importorskip("blake3", reason="the blake3 package is not installed here").blake3


def _b3(data: bytes) -> bytes:
    return blake3(data).digest()


async def test_a_fit_task_carries_the_blake3_of_the_global_vector_it_names(start_coordinator, stub_client, tmp_path):
    coord, client, model, round, g, local = await opened_round(start_coordinator, stub_client,
                                                               local_vector_dir=tmp_path / "lv")
    task = await client.poll("client-a", model)
    assert task.vector_sha256 == hashlib.sha256(g.tobytes()).digest()
    assert task.vector_blake3 == _b3(g.tobytes())
    assert task.vector_blake3 == _b3((local / "global" / f"{task.vector_sha256.hex()}.f32").read_bytes())


@pytest.mark.slow
async def test_the_next_round_s_task_carries_the_blake3_of_the_committed_vector(start_coordinator, stub_client,
                                                                                tmp_path):
    coord = await start_coordinator(min_clients=1, rounds=2, state_dir=tmp_path / "state",
                                    local_vector_dir=tmp_path / "lv")
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    task = await client.poll("client-a", model)
    _, g = await client.download_vector("client-a", model, task.round)
    assert (await client.submit("client-a", model, task.round, g * np.float32(0.5), 10)).accepted
    deadline = asyncio.get_running_loop().time() + 60
    while (task := await client.poll("client-a", model)).round != 2:    # the long-poll waits for round 2's open
        assert asyncio.get_running_loop().time() < deadline
    committed = coord.engine.store.vector_path(2).read_bytes()
    assert task.vector_sha256 == hashlib.sha256(committed).digest()
    assert task.vector_blake3 == _b3(committed)


async def test_without_a_local_vector_dir_or_announced_blake3_tasks_carry_no_blake3(start_coordinator, stub_client):
    coord, client, model, round, g, local = await opened_round(start_coordinator, stub_client, update_digests=())
    assert local is None
    assert (await client.poll("client-a", model)).vector_blake3 == b""


@pytest.fixture
def published(tmp_path):
    """A vector published as the coordinator does (global/<sha256 hex>.f32): (vector, sha256, blake3)."""
    vector = np.random.default_rng(5).standard_normal(1000).astype(np.float32)
    sha = hashlib.sha256(vector.tobytes()).digest()
    (tmp_path / "global").mkdir()
    (tmp_path / "global" / f"{sha.hex()}.f32").write_bytes(vector.tobytes())
    return vector, sha, _b3(vector.tobytes())


def test_a_device_accepts_the_file_by_its_blake3(tmp_path, published):
    vector, sha, b3 = published
    np.testing.assert_array_equal(LocalVectors(tmp_path).read_global(sha, len(vector), b3), vector)


def test_given_a_blake3_the_device_checks_the_bytes_against_it_not_the_sha256(tmp_path, published):
    vector, sha, b3 = published
    wrong = bytes(32 - 1) + b"\x01"
    assert LocalVectors(tmp_path).read_global(sha, len(vector), wrong) is None   # its sha256 alone would pass


def test_a_changed_file_is_refused_by_its_blake3(tmp_path, published):
    vector, sha, b3 = published
    (tmp_path / "global" / f"{sha.hex()}.f32").write_bytes((vector + 1).tobytes())   # same size, other bytes
    assert LocalVectors(tmp_path).read_global(sha, len(vector), b3) is None


def test_a_task_without_blake3_is_checked_by_sha256_as_before(tmp_path, published):
    vector, sha, b3 = published
    np.testing.assert_array_equal(LocalVectors(tmp_path).read_global(sha, len(vector), b""), vector)
    assert LocalVectors(tmp_path).read_global(bytes(32), len(vector), b"") is None


def test_the_coordinator_s_file_digest_is_blake3_of_the_little_endian_float32_bytes(published):
    from fedort.coordinator.colocated.local_vectors import LocalVectorDir

    vector, sha, b3 = published
    assert digests.BLAKE3 in digests.available()
    assert LocalVectorDir.file_digest(vector) == b3
    assert LocalVectorDir.file_digest(vector.astype(">f4")) == b3   # the bytes on disk, whatever the array's order
