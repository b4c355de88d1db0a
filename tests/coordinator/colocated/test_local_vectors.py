"""coordinator.local_vectors: the co-located vector path, against a real coordinator on 127.0.0.1:0.

A device on the coordinator's host names a file in the coordinator's local vector dir instead of
streaming its update; the coordinator takes only a plain name in ITS directory, a regular file
of the declared size with the declared sha256, and refuses anything else with INVALID_ARGUMENT,
changing nothing. Global vectors are published there as global/<sha256>.f32.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import grpc
import numpy as np
import pytest

from coordinator_fixtures import (mlp_artifacts, make_config, nothing_changed, opened_round,  # noqa: F401 (fixtures)
                                  start_coordinator, stub_client, update_header)
from fedort.coordinator import Coordinator
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.common.errors import ConfigError


def write(path: Path, vector: np.ndarray) -> Path:
    path.write_bytes(np.ascontiguousarray(vector, dtype="<f4").tobytes())
    return path


async def submit_file(client, cid: str, model: str, round: int, vector: np.ndarray, name: str,
                      n: int = 10, chunks: tuple[bytes, ...] = ()) -> pb.SubmitReply:
    header = update_header(cid, model, round, vector, n)
    header.local_file = name
    return await client.submit_parts([pb.UpdatePart(header=header), *(pb.UpdatePart(chunk=c) for c in chunks)])


async def _two_clients(start_coordinator, stub_client, state_dir, local_vector_dir):
    """A one-round coordinator with a local vector dir, client-a and client-b joined: (coord, client, model)."""
    coord = await start_coordinator(min_clients=2, rounds=1, state_dir=state_dir, local_vector_dir=local_vector_dir)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    return coord, client, model


async def _trained(client, model: str, cid: str, i: int):
    """`cid`'s FIT task and its update: the global vector, changed in a way of its own (the i-th client's)."""
    task = await client.poll(cid, model)
    _, g = await client.download_vector(cid, model, task.round)
    return task, (g * np.float32(0.9) + np.float32(0.1 * (i + 1))).astype(np.float32)


@pytest.mark.slow
async def test_an_update_handed_over_as_a_file_gives_the_same_global_vector_bit_for_bit_as_streamed(
        start_coordinator, stub_client, tmp_path):
    results = []
    for mode in ("stream", "file"):
        coord, client, model = await _two_clients(start_coordinator, stub_client, tmp_path / mode,
                                                  tmp_path / mode / "local-vectors")
        for i, cid in enumerate(("client-a", "client-b")):
            task, update = await _trained(client, model, cid, i)
            if mode == "stream":
                reply = await client.submit(cid, model, task.round, update, 10 + 7 * i)
            else:
                name = f"{cid}.upload.f32"
                write(tmp_path / mode / "local-vectors" / name, update)
                reply = await submit_file(client, cid, model, task.round, update, name, 10 + 7 * i)
                assert not (tmp_path / mode / "local-vectors" / name).exists()     # moved into the spool
            assert reply.accepted and not reply.duplicate
        await asyncio.wait_for(coord.wait_done(), 60)
        results.append(coord.engine.store.vector_path(2).read_bytes())
    assert results[0] == results[1]


async def test_the_join_reply_names_the_directory_and_the_round_s_global_vector_is_published_there(
        start_coordinator, stub_client, tmp_path):
    coord, client, model, round, g, local = await opened_round(start_coordinator, stub_client,
                                                               local_vector_dir=tmp_path / "lv")
    assert local == (tmp_path / "lv").resolve()
    task = await client.poll("client-a", model)
    published = local / "global" / f"{task.vector_sha256.hex()}.f32"
    assert published.read_bytes() == g.tobytes()


async def test_a_coordinator_without_the_option_refuses_a_file_reference_and_announces_no_directory(
        start_coordinator, stub_client, tmp_path):
    coord, client, model, round, g, local = await opened_round(start_coordinator, stub_client)
    assert local is None
    write(tmp_path / "client-a.x.f32", g)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await submit_file(client, "client-a", model, round, g, "client-a.x.f32")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "takes no local vector files" in e.value.details() and "--local-vector-dir" in e.value.details()
    nothing_changed(coord, round)
    assert (tmp_path / "client-a.x.f32").exists()


BAD_NAMES = {
    "a path": ("../client-a.x.f32", "plain file name"),
    "an absolute path": ("/tmp/client-a.x.f32", "plain file name"),
    "dot-dot": ("..", "plain file name"),
    "another client's file": ("client-b.x.f32", "plain file name"),
    "not .f32": ("client-a.x", "plain file name"),
}


@pytest.mark.parametrize("case", sorted(BAD_NAMES))
async def test_a_reference_that_is_not_a_plain_name_of_the_client_in_the_directory_is_refused(
        start_coordinator, stub_client, tmp_path, case):
    coord, client, model, round, g, local = await opened_round(start_coordinator, stub_client,
                                                               local_vector_dir=tmp_path / "lv")
    name, reason = BAD_NAMES[case]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await submit_file(client, "client-a", model, round, g, name)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and reason in e.value.details()
    nothing_changed(coord, round)


async def test_a_symlink_out_of_the_directory_is_refused_and_left_alone(start_coordinator, stub_client, tmp_path):
    coord, client, model, round, g, local = await opened_round(start_coordinator, stub_client,
                                                               local_vector_dir=tmp_path / "lv")
    outside = write(tmp_path / "outside.f32", g)
    (local / "client-a.link.f32").symlink_to(outside)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await submit_file(client, "client-a", model, round, g, "client-a.link.f32")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "symbolic link" in e.value.details()
    nothing_changed(coord, round)
    assert (local / "client-a.link.f32").is_symlink() and outside.read_bytes() == g.tobytes()


async def test_a_missing_file_a_directory_and_a_second_hard_link_are_refused(start_coordinator, stub_client,
                                                                              tmp_path):
    coord, client, model, round, g, local = await opened_round(start_coordinator, stub_client,
                                                               local_vector_dir=tmp_path / "lv")
    (local / "client-a.dir.f32").mkdir()
    os.link(write(tmp_path / "lv" / "client-a.one.f32", g), local / "client-a.two.f32")
    for name, reason in (("client-a.none.f32", "no such file"), ("client-a.dir.f32", "not a regular file"),
                         ("client-a.two.f32", "2 hard links")):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await submit_file(client, "client-a", model, round, g, name)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and reason in e.value.details(), name
        nothing_changed(coord, round)
    assert (local / "client-a.one.f32").read_bytes() == g.tobytes()


async def test_a_file_of_the_wrong_size_or_digest_or_with_nan_is_refused_and_nothing_counts(
        start_coordinator, stub_client, tmp_path):
    coord, client, model, round, g, local = await opened_round(start_coordinator, stub_client,
                                                               local_vector_dir=tmp_path / "lv")
    update = (g + np.float32(0.5)).astype(np.float32)
    short = write(local / "client-a.short.f32", update[:-1])
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await submit_file(client, "client-a", model, round, update, short.name)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "bytes; the header declares" in e.value.details()
    assert short.exists()                                                   # refused before it was moved
    write(local / "client-a.other.f32", g)                                  # right size, other bytes
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await submit_file(client, "client-a", model, round, update, "client-a.other.f32")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "sha256 mismatch" in e.value.details()
    bad = update.copy()
    bad[7] = np.nan
    write(local / "client-a.nan.f32", bad)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await submit_file(client, "client-a", model, round, bad, "client-a.nan.f32")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "non-finite" in e.value.details()
    nothing_changed(coord, round)
    write(local / "client-a.good.f32", update)                              # and the device can still send it
    assert (await submit_file(client, "client-a", model, round, update, "client-a.good.f32")).accepted
    assert len(coord.engine.store.submissions(round)) == 1


@pytest.mark.slow
async def test_a_file_taken_into_the_spool_leaves_no_temporary_file_whether_refused_or_accepted(
        start_coordinator, stub_client, tmp_path):
    coord, client, model, round, g, local = await opened_round(start_coordinator, stub_client,
                                                               local_vector_dir=tmp_path / "lv")
    spool = coord.engine.store.layout.spool_dir(round)
    update = (g + np.float32(0.5)).astype(np.float32)
    write(local / "client-a.other.f32", g)                                  # moved into the spool, then refused
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await submit_file(client, "client-a", model, round, update, "client-a.other.f32")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert list(spool.glob(".*.tmp")) == [] and not (local / "client-a.other.f32").exists()
    write(local / "client-a.good.f32", update)
    assert (await submit_file(client, "client-a", model, round, update, "client-a.good.f32")).accepted
    assert list(spool.glob(".*.tmp")) == [] and coord.engine.store.spool_path(round, "client-a").is_file()

async def test_a_file_reference_with_chunks_is_refused(start_coordinator, stub_client, tmp_path):
    coord, client, model, round, g, local = await opened_round(start_coordinator, stub_client,
                                                               local_vector_dir=tmp_path / "lv")
    write(local / "client-a.x.f32", g)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await submit_file(client, "client-a", model, round, g, "client-a.x.f32", chunks=(g.tobytes()[:64],))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "carries no chunks" in e.value.details()
    nothing_changed(coord, round)


async def test_the_directory_must_share_the_state_dir_s_filesystem(mlp_artifacts, tmp_path, other_filesystem_dir):
    coordinator = Coordinator(make_config(mlp_artifacts, state_dir=tmp_path / "state",
                                          local_vector_dir=other_filesystem_dir / "local-vectors"))
    with pytest.raises(ConfigError, match="same filesystem as state_dir"):
        await coordinator.start()
    await coordinator.stop(grace=0)


def test_the_directory_cannot_be_the_state_dir_or_one_of_its_folders(mlp_artifacts, tmp_path):
    for bad in (tmp_path / "state", tmp_path / "state" / "spool", tmp_path / "state" / "vectors"):
        with pytest.raises(ConfigError, match="local_vector_dir must not be the state dir"):
            make_config(mlp_artifacts, state_dir=tmp_path / "state", local_vector_dir=bad)


async def test_a_codec_payload_can_be_handed_over_as_a_file_too(start_coordinator, stub_client, tmp_path):
    import hashlib

    from fedort.protos.update_codecs import get_codec, parse_codec

    coord, client, model, round, g, local = await opened_round(start_coordinator, stub_client,
                                                               local_vector_dir=tmp_path / "lv")
    task = await client.poll("client-a", model)
    payload = get_codec(parse_codec("fp16")).encode(np.full_like(g, 0.25), np.random.default_rng(0))
    (local / "client-a.fp16.f32").write_bytes(payload)
    header = update_header("client-a", model, round, g, 10, codec="fp16", sha256=hashlib.sha256(payload).digest(),
                           payload_bytes=len(payload), base_sha256=task.vector_sha256)
    header.local_file = "client-a.fp16.f32"
    assert (await client.submit_parts([pb.UpdatePart(header=header)])).accepted
    await asyncio.wait_for(coord.wait_done(), 60)
    final = np.frombuffer(coord.engine.store.vector_path(2).read_bytes(), dtype="<f4")
    np.testing.assert_allclose(final, g + np.float32(0.25), atol=1e-3)


def test_only_the_two_newest_global_vectors_stay_published(tmp_path):
    from fedort.coordinator.colocated.local_vectors import LocalVectorDir

    (tmp_path / "state").mkdir()
    local = LocalVectorDir.open(tmp_path / "lv", tmp_path / "state")
    digests = [bytes([i]) * 32 for i in range(4)]
    for i, d in enumerate(digests):
        vector_file = tmp_path / "state" / f"round-{i}.f32"
        vector_file.write_bytes(bytes([i]) * 8)
        local.publish(vector_file, d)
    assert sorted(p.name for p in local.globals.iterdir()) == sorted(f"{d.hex()}.f32" for d in digests[2:])
    assert (local.globals / f"{digests[3].hex()}.f32").read_bytes() == bytes([3]) * 8


@pytest.mark.slow
async def test_a_file_refused_after_it_was_folded_changes_nothing_in_the_aggregate(start_coordinator, stub_client,
                                                                                   tmp_path, caplog):
    """A raw file is folded as it is read and checked; one whose digest then fails (or whose values are not
    finite) is refused, and the round's global vector is bit for bit that of a run that never saw it."""
    results = []
    for mode in ("clean", "refused first"):
        lv = tmp_path / mode / "lv"
        coord, client, model = await _two_clients(start_coordinator, stub_client, tmp_path / mode, lv)
        for i, cid in enumerate(("client-a", "client-b")):
            task, update = await _trained(client, model, cid, i)
            if mode == "refused first":
                write(lv / f"{cid}.other.f32", update + np.float32(3))         # right size, other bytes
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    await submit_file(client, cid, model, task.round, update, f"{cid}.other.f32", 10 + 7 * i)
                assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "mismatch" in e.value.details()
                bad = update.copy()
                bad[-1] = np.inf
                write(lv / f"{cid}.inf.f32", bad)
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    await submit_file(client, cid, model, task.round, bad, f"{cid}.inf.f32", 10 + 7 * i)
                assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "non-finite" in e.value.details()
            write(lv / f"{cid}.good.f32", update)
            assert (await submit_file(client, cid, model, task.round, update, f"{cid}.good.f32", 10 + 7 * i)).accepted
        await asyncio.wait_for(coord.wait_done(), 60)
        assert [s.client_id for s in coord.engine.store.submissions(1)] == ["client-a", "client-b"]
        results.append(coord.engine.store.vector_path(2).read_bytes())
        assert ("refolding the 2 acknowledged updates" in caplog.text) == (mode == "refused first")   # it was folded
    assert results[0] == results[1]
