"""The async mode's upload path: the same admission, slots and monitor as rounds, with the update
bound to the version it trained from (FAILED_PRECONDITION if it names another version's global)
and a delta codec's payload taken relative to that version's global, not the current one."""

from __future__ import annotations

import asyncio
import hashlib

import grpc
import numpy as np
import pytest

from coordinator_fixtures import P_MLP, mlp_artifacts, start_coordinator, stub_client  # noqa: F401 (fixtures)
from fedort.coordinator import RoundState
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.update_codecs import get_codec

ASYNC = dict(mode="async", min_clients=1)


async def _train(client, cid: str, model: str, delta: float):
    """Poll (FIT on the latest version) and download it: (task, its vector, vector + delta)."""
    task = await client.poll(cid, model)
    assert task.kind == pb.Task.FIT, task
    _, vector = await client.download_vector(cid, model, task.round)
    return task, vector, (vector + np.float32(delta)).astype(np.float32)


@pytest.mark.slow
async def test_an_update_naming_another_versions_global_is_refused_failed_precondition(start_coordinator,
                                                                                     stub_client):
    coord = await start_coordinator(rounds=2, buffer_size=1, **ASYNC)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    t1, _, up_a = await _train(client, "client-a", model, 1.0)           # a trains on version 1 ...
    _, _, up_b = await _train(client, "client-b", model, 1.0)
    assert (await client.submit("client-b", model, 1, up_b, 5)).accepted  # ... b makes version 2
    t2 = await client.poll("client-b", model)
    assert t2.round == 2 and t2.vector_sha256 != t1.vector_sha256
    with pytest.raises(grpc.aio.AioRpcError) as err:                       # claims version 2 (staleness 0)
        await client.submit("client-a", model, 2, up_a, 5, trained_from=t1.vector_sha256)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "stale work" in err.value.details() and "version 2" in err.value.details()
    assert coord.engine.buffer.count == 0 and coord.engine.round == 2     # nothing of it was folded
    reply = await client.submit("client-a", model, 1, up_a, 5, trained_from=t1.vector_sha256)
    assert reply.accepted and "staleness 1" in reply.message              # the truth is accepted


@pytest.mark.slow
async def test_a_delta_codec_update_is_relative_to_the_version_it_trained_from(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=2, buffer_size=2, staleness_weight="poly:1", **ASYNC)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    for cid in ("client-b", "client-c"):
        await client.join(cid)
    t1, g1, _ = await _train(client, "client-a", model, 0.0)             # a trains on version 1 ...
    for cid in ("client-b", "client-c"):
        _, _, up = await _train(client, cid, model, 1.0)
        assert (await client.submit(cid, model, 1, up, 5)).accepted       # ... b and c make version 2 = g1 + 1
    t2, g2, up_b = await _train(client, "client-b", model, 1.0)
    assert coord.engine.round == 2 and t2.round == 2 and t2.vector_sha256 != t1.vector_sha256
    delta = np.full(P_MLP, 0.5, np.float32)                               # exact in fp16
    payload = get_codec("fp16").encode(delta)
    chunks = [payload[i:i + 4096] for i in range(0, len(payload), 4096)]
    reply = await client.submit("client-a", model, 1, g1, 5, chunks=chunks, codec="fp16", length=P_MLP,
                                payload_bytes=len(payload), sha256=hashlib.sha256(payload).digest(),
                                base_sha256=t1.vector_sha256, trained_from=t1.vector_sha256)
    assert reply.accepted and "staleness 1" in reply.message
    assert (await client.submit("client-b", model, 2, up_b, 5)).accepted
    assert (await asyncio.wait_for(coord.wait_done(), 20)).state is RoundState.DONE
    _, g3 = await client.download_vector("client-b", model, 3)
    np.testing.assert_allclose(g3, g2 + (0.5 * 5 * 0.5 + 5 * 1.0) / 10, atol=1e-5)


async def test_async_uploads_use_the_upload_slots_and_feed_the_monitor(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=2, buffer_size=2, **ASYNC)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    _, _, up = await _train(client, "client-a", model, 1.0)
    assert (await client.submit("client-a", model, 1, up, 5)).accepted
    again = await client.submit("client-a", model, 1, up, 5)
    assert again.duplicate
    sample = coord.monitoring.registry.get_sample_value
    assert sample("fedort_updates_total", {"result": "accepted", "reason": ""}) == 1
    assert sample("fedort_updates_total", {"result": "duplicate", "reason": ""}) == 1
    assert sample("fedort_bytes_total", {"direction": "in"}) == 4 * P_MLP
    assert sample("fedort_upload_slots_in_use") == 0 and coord.engine.uploads.slots.in_use == 0
