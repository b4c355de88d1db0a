"""Protocol 1.6: a device may ask for its streamed global vector checked with BLAKE3 (VectorRequest.digests).

A coordinator that announces blake3 (JoinReply.update_digests) puts the global vector's BLAKE3 in every
FIT task (Task.vector_blake3); a device that has the `blake3` package asks for it, and the header then
carries that BLAKE3 (VectorHeader.digest = "blake3"), which the device compares with the task's before
checking the bytes with it. sha256 still names the vector; a device that does not ask, or a coordinator
that announces no blake3, keeps the sha256 stream. Real coordinator on 127.0.0.1:0.
"""

from __future__ import annotations

import asyncio
import hashlib

import numpy as np
import pytest

from coordinator_fixtures import mlp_artifacts, opened_round, start_coordinator, stub_client  # noqa: F401 (fixtures)
from fedort.edge_client.transport.grpc_transport import Transport
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.vector_stream import VectorAssembler, VectorMeta
from fedort.common.errors import ProtocolError, VectorError

blake3 = pytest.importorskip("blake3", reason="the blake3 package is not installed here").blake3


async def _header(client, model: str, round: int, digests: list[str]) -> pb.VectorHeader:
    async for part in client.stub.DownloadVector(pb.VectorRequest(client_id="client-a", model_id=model, round=round,
                                                                  digests=digests), timeout=60):
        return part.header


async def test_a_device_that_asks_gets_the_stream_checked_with_the_task_s_blake3(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client)
    task = await client.poll("client-a", model)
    header = await _header(client, model, round, ["blake3"])
    assert header.digest == "blake3" and header.sha256 == task.vector_blake3 == blake3(g.tobytes()).digest()


async def test_a_device_that_does_not_ask_gets_sha256_as_before(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client)
    header = await _header(client, model, round, [])
    assert header.digest == "" and header.sha256 == hashlib.sha256(g.tobytes()).digest()


async def test_without_announced_blake3_a_device_s_request_gets_sha256(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client, update_digests=())
    header = await _header(client, model, round, ["blake3"])
    assert header.digest == "" and header.sha256 == hashlib.sha256(g.tobytes()).digest()


def _download(port: int, model: str, round: int, **expected) -> tuple[np.ndarray, int]:
    with Transport.connect(f"127.0.0.1:{port}", insecure=True) as t:
        return t.download_global("client-a", model, round, **expected)


@pytest.mark.slow
async def test_the_device_downloads_the_same_vector_checked_with_blake3(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client)
    task = await client.poll("client-a", model)
    vector, received = await asyncio.to_thread(_download, coord.port, model, round, expected_length=g.size,
                                               expected_sha256=task.vector_sha256, expected_blake3=task.vector_blake3)
    assert received == g.nbytes and vector.tobytes() == g.tobytes()


async def test_a_blake3_header_that_is_not_the_task_s_is_refused(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client)
    task = await client.poll("client-a", model)
    with pytest.raises(ProtocolError, match="BLAKE3 .* differs from the task's"):
        await asyncio.to_thread(_download, coord.port, model, round, expected_sha256=task.vector_sha256,
                                expected_blake3=b"\x00" * 32)


def test_bytes_that_do_not_hash_to_the_header_s_blake3_are_refused():
    g = np.arange(1000, dtype=np.float32)
    asm = VectorAssembler(VectorMeta("m", 1, g.size, blake3(g.tobytes()).digest(), digest="blake3"))
    tampered = bytearray(g.tobytes())
    tampered[7] ^= 1
    asm.add(bytes(tampered))
    with pytest.raises(VectorError, match="blake3 mismatch"):
        asm.finish()
