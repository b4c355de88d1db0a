"""A device's downloads reuse the memory of earlier downloads that nothing refers to any more (Transport's
BufferPool), and never overwrite a vector that is still held. Real coordinator on 127.0.0.1:0."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from coordinator_fixtures import mlp_artifacts, opened_round, start_coordinator, stub_client  # noqa: F401 (fixtures)
from fedort.edge_client.transport.grpc_transport import Transport
from fedort.protos.vector_stream import VectorAssembler, VectorMeta
from fedort.common.errors import VectorError


def _address(vector: np.ndarray) -> int:
    return vector.__array_interface__["data"][0]


def _downloads(port: int, model: str, round: int) -> dict:
    with Transport.connect(f"127.0.0.1:{port}", insecure=True) as t:
        first = t.download_vector("client-a", model, round)
        kept = first.copy()
        second = t.download_vector("client-a", model, round)   # `first` is still held: other memory
        out = {"distinct": not np.shares_memory(first, second), "first_intact": first.tobytes() == kept.tobytes()}
        addresses = {_address(first), _address(second)}
        del first, second
        third = t.download_vector("client-a", model, round)   # nothing holds the earlier ones: one of them again
        out["reused"] = _address(third) in addresses
        out["third"] = third.copy()
        return out


async def test_a_download_reuses_released_memory_and_never_a_held_vector(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client)
    out = await asyncio.to_thread(_downloads, coord.port, model, round)
    assert out["distinct"] and out["first_intact"] and out["reused"]
    assert out["third"].tobytes() == g.tobytes()


@pytest.mark.parametrize("wrong", [lambda n: np.empty(n + 1, np.float32), lambda n: np.empty(n, np.float64)])
def test_an_assembler_refuses_a_receive_buffer_that_does_not_fit_the_header(wrong):
    with pytest.raises(VectorError, match="receive buffer"):
        VectorAssembler(VectorMeta("m", 1, 10, b"\0" * 32), out=wrong)
