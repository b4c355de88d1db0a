"""Download deltas: the global vector as `xor+zstd` against the previous round's, lossless and checked."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from fedort.edge_client import EdgeClient
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.update_codecs.xor_delta import DOWNLOAD_DELTA, decode_download, encode_download
from fedort.common.errors import VectorError

from coordinator_fixtures import mlp_artifacts, start_coordinator, stub_client  # noqa: F401 (fixtures)
from edge_support import config, digits, part, run_in_threads, server  # noqa: F401 (fixtures)


def test_the_delta_rebuilds_the_vector_bit_for_bit_and_a_corrupt_one_is_refused():
    rng = np.random.default_rng(3)
    old = rng.standard_normal(5001).astype(np.float32)
    new = (old + 1e-3 * rng.standard_normal(5001)).astype(np.float32)
    new[7] = -0.0
    payload = encode_download(new, old)
    assert len(payload) < new.nbytes
    assert np.array_equal(decode_download(payload, old).view("<u4"), new.view("<u4"))
    with pytest.raises(VectorError, match="not a valid zstd frame"):
        decode_download(payload[:-5], old)
    with pytest.raises(VectorError, match="declares"):
        decode_download(payload, old[:-1])


@pytest.mark.slow
def test_devices_download_later_rounds_as_deltas_and_train_on_the_exact_vector(server, tmp_path, digits):
    address = server.start_with(rounds=3)
    clients = [EdgeClient(config(address, tmp_path, f"dev{i}"), data=part(digits, i, 2, 200)) for i in range(2)]
    for s in run_in_threads(clients):
        assert not isinstance(s, BaseException), s
        assert s.outcome == "done" and [r.outcome for r in s.reports] == ["accepted"] * 3
        full = 4 * clients[0].manifest.parameter_count
        assert s.reports[0].bytes_down == full                 # nothing cached yet: raw
        assert all(0 < r.bytes_down < full for r in s.reports[1:]), [r.bytes_down for r in s.reports]


async def test_a_request_naming_a_vector_that_is_not_the_previous_global_gets_raw(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=1, rounds=2)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.fit_round("client-a", model, 0.5, 10)
    task = await client.poll("client-a", model)
    assert task.round == 2
    for cached in (b"\1" * 32, task.vector_sha256, b"short"):
        parts = [p async for p in client.stub.DownloadVector(
            pb.VectorRequest(client_id="client-a", model_id=model, round=2, cached_sha256=cached), timeout=10)]
        assert parts[0].header.codec == "raw" and parts[0].header.sha256 == task.vector_sha256
    previous = coord.engine.store.get_meta("initial_vector_sha256")
    parts = await asyncio.wait_for(_download(client, model, bytes.fromhex(previous)), 10)
    assert parts[0].header.codec == DOWNLOAD_DELTA and parts[0].header.base_sha256.hex() == previous


async def _download(client, model: str, cached: bytes) -> list:
    return [p async for p in client.stub.DownloadVector(
        pb.VectorRequest(client_id="client-a", model_id=model, round=2, cached_sha256=cached), timeout=10)]
