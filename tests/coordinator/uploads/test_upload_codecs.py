"""The coordinator's upload path with every codec: admitted, validated while spooling, decoded into the fold."""

from __future__ import annotations

import asyncio
import hashlib

import grpc
import numpy as np
import pytest

from fedort.coordinator.aggregation import ClippedFedAvg, FedAvg, Median, Update
from fedort.coordinator.aggregation.decode import check_reconstructed
from fedort.protos.update_codecs import SparsePiece, get_codec
from fedort.common.errors import VectorError
from fedort.common.round_state import RoundState

from coordinator_fixtures import (  # noqa: F401 (fixtures)
    P_MLP, manual_clock, mlp_artifacts, pass_the_deadline, start_coordinator, stub_client,
)

CODECS = ["raw", "fp16", "bf16", "int8", "zstd+int8", "topk:0.1", "zstd+topk:0.1"]


def _encode(codec: str, g: np.ndarray, x: np.ndarray, seed: int = 0) -> bytes:
    spec = get_codec(codec)
    return spec.encode(x if codec == "raw" else (x - g).astype(np.float32), np.random.default_rng(seed))


def _spool(tmp_path, name: str, payload: bytes):
    path = tmp_path / name
    path.write_bytes(payload)
    return path


def _expected(codec: str, g: np.ndarray, payload: bytes) -> np.ndarray:
    decoded = get_codec(codec).decode(payload, len(g))
    return decoded if codec == "raw" else g + decoded


@pytest.mark.parametrize("strategy", [FedAvg, lambda: ClippedFedAvg(0.5), Median], ids=["fedavg", "clip", "median"])
def test_the_fold_reconstructs_every_codec_from_its_spooled_payload(tmp_path, strategy):
    rng = np.random.default_rng(1)
    g = rng.standard_normal(5000).astype(np.float32)
    xs = [(g + 0.1 * rng.standard_normal(5000)).astype(np.float32) for _ in CODECS]
    payloads = [_encode(c, g, x, i) for i, (c, x) in enumerate(zip(CODECS, xs))]
    weights = list(range(1, len(CODECS) + 1))
    agg = strategy().new_round(g)
    for i, (codec, payload, w) in enumerate(zip(CODECS, payloads, weights)):
        agg.add(Update(f"c{i}", w, codec, _spool(tmp_path, f"c{i}.bin", payload)))
    got = agg.result().vector
    decoded = [_expected(c, g, p) for c, p in zip(CODECS, payloads)]
    reference = strategy().new_round(g)
    for i, (x, w) in enumerate(zip(decoded, weights)):
        reference.add(Update(f"c{i}", w, "raw", _spool(tmp_path, f"r{i}.bin", x.astype("<f4").tobytes())))
    np.testing.assert_allclose(got, reference.result().vector, rtol=1e-5, atol=1e-5)


def test_fedavg_of_deltas_adds_the_global_once():
    g = np.full(1000, 3.0, np.float32)
    d = np.zeros(1000, np.float32)
    d[7] = 2.0
    payload = get_codec("topk:0.001").encode(d)
    agg = FedAvg().new_round(g)
    agg.add(Update("a", 1, "topk:0.001", None, payload=np.frombuffer(payload, np.uint8)))
    agg.add(Update("b", 3, "raw", None, payload=g + 1))
    expected = (1 * (g + d) + 3 * (g + 1)) / 4
    np.testing.assert_allclose(agg.result().vector, expected, rtol=1e-6)


async def _fit(client, cid: str, model: str):
    task = await client.poll(cid, model)
    _, g = await client.download_vector(cid, model, task.round)
    return task, g


async def _submit_codec(client, cid, model, task, g, codec, payload, **fields):
    values = dict(codec=codec, length=P_MLP, payload_bytes=len(payload), sha256=hashlib.sha256(payload).digest(),
                  base_sha256=b"" if codec == "raw" else task.vector_sha256)
    values.update(fields)
    chunks = [payload[i:i + 4096] for i in range(0, len(payload), 4096)]
    return await client.submit(cid, model, task.round, g, 10, chunks=chunks, **values)


@pytest.mark.parametrize("codec", ["int8", "zstd+int8", "topk:0.01", "fp16"])
async def test_a_coded_round_through_grpc_commits_the_decoded_mean(start_coordinator, stub_client, codec):
    coord = await start_coordinator(min_clients=2, rounds=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    expected = []
    for i, cid in enumerate(("client-a", "client-b")):
        task, g = await _fit(client, cid, model)
        x = (g + np.float32(0.01 * (i + 1))).astype(np.float32)
        payload = _encode(codec, g, x, seed=i)
        assert (await _submit_codec(client, cid, model, task, g, codec, payload)).accepted
        expected.append(_expected(codec, g, payload))
    assert (await asyncio.wait_for(coord.wait_done(), 20)).state is RoundState.DONE
    _, final = await client.download_vector("client-a", model, 2)
    np.testing.assert_allclose(final, (expected[0] + expected[1]) / 2, rtol=1e-5, atol=1e-6)


def _corrupt_int8(payload: bytes) -> bytes:
    bad = bytearray(payload)
    bad[0:4] = np.float32(np.nan).tobytes()    # the first block's scale
    return bytes(bad)


def _topk_out_of_range(payload: bytes) -> bytes:
    recs = np.frombuffer(payload, dtype=[("i", "<u4"), ("v", "<f4")]).copy()
    recs["i"][-1] = P_MLP + 5
    return recs.tobytes()


@pytest.mark.parametrize("codec,corrupt,message", [
    ("int8", _corrupt_int8, "scale"),
    ("topk:0.01", _topk_out_of_range, "out of range"),
    ("zstd+int8", lambda p: p[:-9], "ended after"),
])
async def test_a_malformed_payload_is_invalid_argument_and_changes_nothing(start_coordinator, stub_client,
                                                                          codec, corrupt, message):
    coord = await start_coordinator(min_clients=1, rounds=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    task, g = await _fit(client, "client-a", model)
    payload = _encode(codec, g, (g + np.float32(0.01)).astype(np.float32))
    bad = corrupt(payload)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _submit_codec(client, "client-a", model, task, g, codec, bad, payload_bytes=len(payload))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in e.value.details()
    spool = coord.engine.store.spool_dir(task.round)
    assert not spool.exists() or list(spool.iterdir()) == []
    assert coord.engine.training.reported == {}
    assert (await _submit_codec(client, "client-a", model, task, g, codec, payload)).accepted


def test_values_that_overflow_once_the_global_is_added_are_refused():
    big = np.finfo(np.float32).max
    g = np.array([1.0, big], np.float32)
    check_reconstructed(SparsePiece(np.array([0]), np.array([big], np.float32)), g, "update")   # 1 + max: finite
    with pytest.raises(VectorError, match="non-finite values .* once added to the global vector"):
        check_reconstructed(SparsePiece(np.array([1]), np.array([big], np.float32)), g, "update")


async def test_a_codec_the_run_does_not_allow_is_refused_and_join_announces_the_allowed(start_coordinator,
                                                                                        stub_client):
    coord = await start_coordinator(min_clients=1, rounds=1, codecs=("int8",))
    client = stub_client(coord.port)
    reply = await client.join("client-a")
    assert list(reply.upload_codecs) == ["raw", "int8"]
    task, g = await _fit(client, "client-a", reply.model_id)
    payload = _encode("fp16", g, g)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _submit_codec(client, "client-a", reply.model_id, task, g, "fp16", payload)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not allowed in this run" in e.value.details()


@pytest.mark.slow
async def test_a_restart_replays_coded_updates_from_the_spool(start_coordinator, stub_client, manual_clock):
    coord = await start_coordinator(min_clients=2, rounds=1, round_timeout_s=600, max_round_attempts=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    task, g = await _fit(client, "client-a", model)
    pa = _encode("topk:0.01", g, (g + np.float32(0.5)).astype(np.float32))
    assert (await _submit_codec(client, "client-a", model, task, g, "topk:0.01", pa)).accepted
    await pass_the_deadline(coord, manual_clock)
    assert (await asyncio.wait_for(coord.wait_done(), 60)).state is RoundState.FAILED   # b never reported
    await coord.stop(grace=0)
    again = await start_coordinator(min_clients=2, rounds=1, round_timeout_s=10, max_round_attempts=1)
    client = stub_client(again.port)
    await client.join("client-b")
    task, g = await _fit(client, "client-b", model)
    pb_ = _encode("int8", g, (g - np.float32(0.25)).astype(np.float32))
    assert (await _submit_codec(client, "client-b", model, task, g, "int8", pb_)).accepted
    assert (await asyncio.wait_for(again.wait_done(), 20)).state is RoundState.DONE
    _, final = await client.download_vector("client-b", model, 2)
    expected = (_expected("topk:0.01", g, pa) + _expected("int8", g, pb_)) / 2
    np.testing.assert_allclose(final, expected, rtol=1e-5, atol=1e-6)


def test_the_allowed_list_is_canonical_and_a_family_admits_every_parameter(tmp_path):
    from fedort.coordinator.uploads.admission import allowed_codecs, codec_allowed
    from fedort.coordinator.config import CoordinatorConfig

    allowed = allowed_codecs(CoordinatorConfig.from_mapping(dict(artifacts=tmp_path, state_dir=tmp_path / "s",
                                               codecs="int8:256,topk:0.010,zstd+topk")))
    assert allowed == ["raw", "int8", "topk:0.01", "zstd+topk"]
    assert [codec_allowed(allowed, c) for c in ("raw", "int8", "topk:0.01", "topk:0.02", "zstd+topk:0.5", "fp16")] \
        == [True, True, True, False, True, False]
