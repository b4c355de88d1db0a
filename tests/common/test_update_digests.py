"""protos.digests: BLAKE3 update digests, negotiated (protocol 1.3), against a real coordinator on 127.0.0.1:0.

A coordinator announces the digests it accepts besides sha256 in JoinReply.update_digests; an
update whose VectorHeader.digest names one it did not announce (or none it knows) is refused
with INVALID_ARGUMENT before anything is stored, and a BLAKE3-digested update is checked as
strictly as a sha256 one: streamed, as a co-located file, and when recovery re-reads its spool
file. Real EdgeClients pick BLAKE3 only where announced, so an older coordinator sees sha256.
"""

from __future__ import annotations

import asyncio

import blake3
import grpc
import numpy as np
import pytest

from coordinator_fixtures import (chunks_of, make_config, mlp_artifacts, nothing_changed,  # noqa: F401 (fixtures)
                                  opened_round, start_coordinator, stub_client, update_header)
from fedort.coordinator.state.integrity import read_verified_bytes
from fedort.coordinator.state.store import StateStore
from fedort.edge_client import EdgeClient, EdgeConfig
from fedort.common import digests
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.common.errors import CorruptStateError
from fedort.simulations import LocalCoordinator


def b3(vector: np.ndarray) -> bytes:
    return blake3.blake3(np.ascontiguousarray(vector, dtype="<f4").tobytes()).digest()


@pytest.mark.slow
async def test_a_coordinator_announces_blake3_and_records_a_blake3_update_with_its_algorithm(
        start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client)
    assert list((await client.join("client-b")).update_digests) == ["blake3"]   # what every Join announces
    update = (g + np.float32(0.5)).astype(np.float32)
    reply = await client.submit("client-a", model, round, update, 10, digest="blake3", sha256=b3(update))
    assert reply.accepted and not reply.duplicate
    (row,) = coord.engine.store.submissions(round)
    assert row.sha256 == f"blake3:{b3(update).hex()}"
    await asyncio.wait_for(coord.wait_done(), 60)
    assert np.array_equal(np.fromfile(coord.engine.store.vector_path(2), dtype="<f4"), update)


@pytest.mark.slow
async def test_a_sha256_only_coordinator_refuses_a_blake3_update_and_still_takes_sha256(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client, update_digests=())
    assert list((await client.join("client-b")).update_digests) == []
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit("client-a", model, round, g, 10, digest="blake3", sha256=b3(g))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'blake3' is not accepted" in e.value.details() and "['sha256']" in e.value.details()
    nothing_changed(coord, round)
    assert (await client.submit("client-a", model, round, g, 10)).accepted   # an older device's update


@pytest.mark.slow
async def test_an_unknown_digest_is_refused(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit("client-a", model, round, g, 10, digest="md5", sha256=b3(g))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "unknown vector digest 'md5'" in e.value.details()
    nothing_changed(coord, round)


@pytest.mark.slow
async def test_a_streamed_blake3_update_whose_bytes_differ_is_refused_and_nothing_counts(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client)
    sent = g.copy()
    sent[7] += np.float32(1.0)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit("client-a", model, round, g, 10, digest="blake3", sha256=b3(g),
                            chunks=chunks_of(sent))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "blake3 mismatch" in e.value.details()
    nothing_changed(coord, round)


async def test_a_corrupted_co_located_file_with_a_blake3_digest_is_refused_and_nothing_counts(
        start_coordinator, stub_client, tmp_path):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client, local_vector_dir=tmp_path / "lv")
    on_disk = g.copy()
    on_disk[3] = np.float32(42.0)          # the file no longer holds what the header's digest covers
    name = "client-a.corrupt.f32"
    (tmp_path / "lv" / name).write_bytes(on_disk.tobytes())
    header = update_header("client-a", model, round, g, 10, digest="blake3", sha256=b3(g))
    header.local_file = name
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit_parts([pb.UpdatePart(header=header)])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "blake3 mismatch" in e.value.details()
    nothing_changed(coord, round)
    assert not (tmp_path / "lv" / name).exists()     # moved before the check, then deleted (module docstring)


def test_recovery_checks_a_spooled_blake3_update_with_blake3(tmp_path):
    payload = np.arange(1000, dtype=np.float32)
    path = tmp_path / "client-a.f32"
    path.write_bytes(payload.tobytes())
    recorded = digests.stored("blake3", b3(payload))
    assert read_verified_bytes(path, recorded).tobytes() == payload.tobytes()
    raw = bytearray(path.read_bytes())
    raw[10] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptStateError, match="hashes to"):
        read_verified_bytes(path, recorded)


@pytest.mark.slow
@pytest.mark.parametrize("accepted, expected", [(("blake3",), "blake3:"), ((), "")])
def test_a_device_uses_blake3_only_where_the_coordinator_announces_it(mlp_artifacts, tmp_path, accepted, expected):
    rng = np.random.default_rng(0)
    data = {"x": rng.normal(size=(16, 64)).astype(np.float32), "labels": rng.integers(0, 10, 16).astype(np.int64)}
    for local in (True, False):      # a file in the local vector dir, and a stream
        state = tmp_path / f"state-{local}"
        with LocalCoordinator(make_config(mlp_artifacts, state, rounds=1, min_clients=1, update_digests=accepted),
                              local_vectors=local) as coordinator:
            summary = EdgeClient(EdgeConfig(coordinator=coordinator.address, name="c0", client_id="c0", insecure=True,
                                            cache_dir=tmp_path / f"cache-{local}", heartbeats=False,
                                            persist_identity=False), data=data).run()
            assert coordinator.wait(timeout=60).rounds_completed == 1
        store = StateStore(state, readonly=True)
        try:
            (row,) = store.submissions(1)
        finally:
            store.close()
        assert [r.outcome for r in summary.reports] == ["accepted"]
        assert row.sha256.startswith(expected) and (expected or ":" not in row.sha256)


def test_the_config_refuses_an_unknown_digest(mlp_artifacts, tmp_path):
    with pytest.raises(Exception, match="update_digests"):
        make_config(mlp_artifacts, tmp_path / "state", update_digests=("md5",))


def test_blake3_is_chosen_only_when_announced():
    assert digests.choose(["blake3"]) == "blake3"
    assert digests.choose([]) == digests.choose(["sha512"]) == "sha256"
