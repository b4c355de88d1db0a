"""Resumable unary uploads over real gRPC: the same update SubmitUpdate takes, in parts, surviving a cut link;
malformed parts and other clients' upload ids are refused and change nothing; idle uploads expire."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3

import grpc
import numpy as np
import pytest

from coordinator_fixtures import (  # noqa: F401
    RPC_TIMEOUT, chunks_of, mlp_artifacts, nothing_changed, opened_round, start_coordinator, stub_client, update_header,
)
from cut_proxy import CutProxy
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc

PART = 16384


def raw(v: np.ndarray) -> bytes:
    return np.ascontiguousarray(v, dtype="<f4").tobytes()


def part(cid: str, state: pb.UploadState, data: bytes, offset: int | None = None, sha: bytes | None = None):
    return pb.UploadPartRequest(client_id=cid, upload_id=state.upload_id,
                                offset=state.offset if offset is None else offset, data=data,
                                sha256=hashlib.sha256(data).digest() if sha is None else sha)


async def put_all(stub, cid: str, state: pb.UploadState, payload: bytes) -> tuple[pb.UploadState, int]:
    """Put the rest of `payload` from the upload's offset, resuming after UNAVAILABLE; (state, bytes sent)."""
    sent = 0
    while state.offset < len(payload):
        data = payload[state.offset:state.offset + PART]
        sent += len(data)
        try:
            state = await stub.PutUploadPart(part(cid, state, data), timeout=RPC_TIMEOUT)
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e.details()
            state = await resumed(stub, cid, state.upload_id)
    return state, sent


async def resumed(stub, cid: str, upload_id: str, tries: int = 5) -> pb.UploadState:
    """GetUpload once the link is back: a call that lands on the dying connection is UNAVAILABLE too."""
    for attempt in range(tries):
        try:
            return await stub.GetUpload(pb.UploadRef(client_id=cid, upload_id=upload_id), timeout=RPC_TIMEOUT,
                                        wait_for_ready=True)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE or attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


async def upload(stub, header: pb.UpdateHeader, payload: bytes) -> pb.SubmitReply:
    state = await stub.BeginUpload(pb.BeginUploadRequest(header=header), timeout=RPC_TIMEOUT)
    state, _ = await put_all(stub, header.client_id, state, payload)
    return await stub.CommitUpload(pb.UploadRef(client_id=header.client_id, upload_id=state.upload_id),
                                   timeout=RPC_TIMEOUT)


def only_the_open_upload(coord, offset: int) -> None:
    """Nothing counted or stored for round 1; the spool holds the open upload's temp file of `offset` bytes."""
    assert coord.engine.store.submissions(1) == [] and coord.engine.training.reported == {}
    assert [p.stat().st_size for p in coord.engine.store.spool_dir(1).iterdir()] == [offset]


async def committed(coord, round: int) -> None:
    deadline = asyncio.get_running_loop().time() + 60
    while coord.engine.global_vector.round <= round:
        left = deadline - asyncio.get_running_loop().time()
        assert left > 0, f"round {round} did not commit"
        await coord.engine.wait_change(min(left, 0.5))


async def test_a_resumable_upload_commits_the_round_as_a_streamed_one_does(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=1, max_chunk_bytes=PART, inline_update_bytes=0)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    task = await client.poll("client-a", model)
    await client.poll("client-b", model)
    _, g = await client.download_vector("client-a", model, task.round)
    a, b = g + np.float32(1), g + np.float32(4)
    assert (await client.submit("client-a", model, 1, a, 10, chunks=chunks_of(a, PART))).accepted
    reply = await upload(client.stub, update_header("client-b", model, 1, b, 30), raw(b))
    assert reply.accepted and not reply.duplicate and reply.round == 1
    await committed(coord, 1)
    np.testing.assert_allclose(coord.engine.global_vector.vector, (10 * a + 30 * b) / 40, atol=1e-6)
    with sqlite3.connect(coord.state_dir / "state.db") as db:
        rows = db.execute("SELECT client_id, num_examples FROM submissions WHERE round = 1 ORDER BY client_id")
        assert rows.fetchall() == [("client-a", 10), ("client-b", 30)]


async def test_a_cut_link_resumes_from_the_last_acknowledged_part(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client, max_chunk_bytes=PART,
                                                            inline_update_bytes=0)
    proxy = await CutProxy.start(coord.port)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel:
            stub = pb_grpc.CoordinatorStub(channel)
            update = g + np.float32(2)
            payload = raw(update)
            state = await stub.BeginUpload(pb.BeginUploadRequest(
                header=update_header("client-a", model, round, update, 7)), timeout=RPC_TIMEOUT)
            state = await stub.PutUploadPart(part("client-a", state, payload[:PART]), timeout=RPC_TIMEOUT)
            proxy.cut_after(PART // 2)          # the second part is cut off half-way
            state, sent = await put_all(stub, "client-a", state, payload)
            reply = await stub.CommitUpload(pb.UploadRef(client_id="client-a", upload_id=state.upload_id),
                                            timeout=RPC_TIMEOUT)
    finally:
        await proxy.close()
    assert proxy.cuts == 1 and reply.accepted and not reply.duplicate
    assert 0 < PART + sent - len(payload) <= PART    # the bytes sent twice: at most the one part that was cut
    await committed(coord, round)
    np.testing.assert_array_equal(coord.engine.global_vector.vector, update)


@pytest.fixture
async def begun(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client, max_chunk_bytes=PART,
                                                            inline_update_bytes=0)
    update = g + np.float32(1)
    state = await client.stub.BeginUpload(pb.BeginUploadRequest(
        header=update_header("client-a", model, round, update, 5)), timeout=RPC_TIMEOUT)
    state = await client.stub.PutUploadPart(part("client-a", state, raw(update)[:PART]), timeout=RPC_TIMEOUT)
    return coord, client, state, raw(update)


def _bad_parts(state: pb.UploadState, payload: bytes) -> dict[str, tuple[grpc.StatusCode, pb.UploadPartRequest]]:
    nxt = payload[PART:2 * PART]
    return {
        "wrong offset": (grpc.StatusCode.FAILED_PRECONDITION, part("client-a", state, nxt, offset=0)),
        "bad digest": (grpc.StatusCode.INVALID_ARGUMENT, part("client-a", state, nxt, sha=hashlib.sha256(b"x").digest())),
        "oversize": (grpc.StatusCode.INVALID_ARGUMENT, part("client-a", state, payload[PART:2 * PART + 1])),
        "beyond the payload": (grpc.StatusCode.INVALID_ARGUMENT,
                               part("client-a", state, payload[-100:] + b"\0" * 8, offset=len(payload) - 100)),
        "empty part": (grpc.StatusCode.INVALID_ARGUMENT, part("client-a", state, b"")),
    }


@pytest.mark.parametrize("case", list(_bad_parts(pb.UploadState(), b"\0" * 40000)))
async def test_a_malformed_part_is_refused_and_changes_nothing(begun, case):
    coord, client, state, payload = begun
    code, request = _bad_parts(state, payload)[case]
    if case == "beyond the payload":   # reach the last part first: only its end can overrun
        state, _ = await put_all(client.stub, "client-a", state, payload[:len(payload) - 100])
        request = part("client-a", state, payload[-100:] + b"\0" * 8)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.PutUploadPart(request, timeout=RPC_TIMEOUT)
    assert err.value.code() == code, err.value.details()
    ref = pb.UploadRef(client_id="client-a", upload_id=state.upload_id)
    assert (await client.stub.GetUpload(ref, timeout=RPC_TIMEOUT)).offset == state.offset
    only_the_open_upload(coord, state.offset)
    state, _ = await put_all(client.stub, "client-a", state, payload)   # and the upload still completes
    assert (await client.stub.CommitUpload(ref, timeout=RPC_TIMEOUT)).accepted


async def test_committing_again_repeats_the_answer_and_counts_once(begun):
    coord, client, state, payload = begun
    state, _ = await put_all(client.stub, "client-a", state, payload)
    ref = pb.UploadRef(client_id="client-a", upload_id=state.upload_id)
    first = await client.stub.CommitUpload(ref, timeout=RPC_TIMEOUT)
    assert await client.stub.CommitUpload(ref, timeout=RPC_TIMEOUT) == first and first.accepted
    assert [row.client_id for row in coord.engine.store.submissions(1)] == ["client-a"]


async def test_wrong_offset_names_the_expected_one(begun):
    _, client, state, payload = begun
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.PutUploadPart(part("client-a", state, payload[:PART], offset=0), timeout=RPC_TIMEOUT)
    assert f"at offset {PART}, got offset 0" in err.value.details()


async def test_commit_before_every_byte_arrived_is_failed_precondition(begun):
    coord, client, state, _ = begun
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.CommitUpload(pb.UploadRef(client_id="client-a", upload_id=state.upload_id),
                                       timeout=RPC_TIMEOUT)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    only_the_open_upload(coord, PART)


async def test_beginning_the_same_update_again_answers_the_open_upload(begun, stub_client):
    coord, client, state, payload = begun
    header = update_header("client-a", coord.engine.model_id, 1, np.frombuffer(payload, "<f4"), 5)
    again = await client.stub.BeginUpload(pb.BeginUploadRequest(header=header), timeout=RPC_TIMEOUT)
    assert (again.upload_id, again.offset, again.payload_bytes) == (state.upload_id, PART, len(payload))


async def test_another_clients_upload_id_is_permission_denied(begun):
    coord, client, state, payload = begun
    await client.join("client-b")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.PutUploadPart(part("client-b", state, payload[PART:2 * PART]), timeout=RPC_TIMEOUT)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert (await client.stub.GetUpload(pb.UploadRef(client_id="client-a", upload_id=state.upload_id),
                                        timeout=RPC_TIMEOUT)).offset == PART


async def test_an_idle_upload_expires_and_frees_its_slot(begun):
    coord, client, state, payload = begun
    uploads = coord.servicer.resumable
    now = uploads.clock()
    uploads.clock = lambda: now + uploads.idle_s + 1      # the idle time passes
    ref = pb.UploadRef(client_id="client-a", upload_id=state.upload_id)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.GetUpload(ref, timeout=RPC_TIMEOUT)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    nothing_changed(coord, 1)
    # its upload slot is free again: the same client's streamed update is taken
    reply = await client.submit("client-a", coord.engine.model_id, 1, np.frombuffer(payload, "<f4"), 5,
                                chunks=chunks_of(np.frombuffer(payload, "<f4"), PART))
    assert reply.accepted and not reply.duplicate


async def test_a_header_naming_a_local_file_is_refused(begun):
    coord, client, _, payload = begun
    header = update_header("client-a", coord.engine.model_id, 1, np.frombuffer(payload, "<f4"), 5)
    header.local_file = "client-a.x"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.BeginUpload(pb.BeginUploadRequest(header=header), timeout=RPC_TIMEOUT)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_new_uploads_count_against_the_submission_rate_and_resuming_does_not(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client, max_chunk_bytes=PART,
                                                            submissions_per_minute=1)
    update = g + np.float32(1)
    begin = lambda v: client.stub.BeginUpload(pb.BeginUploadRequest(  # noqa: E731
        header=update_header("client-a", model, round, v, 5)), timeout=RPC_TIMEOUT)
    first = await begin(update)
    assert (await begin(update)).upload_id == first.upload_id      # the same update again: resumed, not charged
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await begin(update + np.float32(1))                        # another update: a second submission
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.slow
async def test_an_open_upload_ends_with_its_round(start_coordinator, stub_client):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client, max_chunk_bytes=PART,
                                                            round_timeout_s=2, max_round_attempts=1)
    update = g + np.float32(1)
    state = await client.stub.BeginUpload(pb.BeginUploadRequest(
        header=update_header("client-a", model, round, update, 5)), timeout=RPC_TIMEOUT)
    state = await client.stub.PutUploadPart(part("client-a", state, raw(update)[:PART]), timeout=RPC_TIMEOUT)
    deadline = asyncio.get_running_loop().time() + 60
    while coord.engine.training is not None and not coord.engine.training.closing:   # the round's deadline passes
        assert asyncio.get_running_loop().time() < deadline, "round 1 did not close"
        await coord.engine.wait_change(0.5)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.PutUploadPart(part("client-a", state, raw(update)[PART:2 * PART]), timeout=RPC_TIMEOUT)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "closed" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.GetUpload(pb.UploadRef(client_id="client-a", upload_id=state.upload_id), timeout=RPC_TIMEOUT)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("field, value", [("payload_bytes", 4 * 9610 + 4), ("length", 9609)])
async def test_a_header_of_the_wrong_total_length_is_refused_at_begin(start_coordinator, stub_client, field, value):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client, max_chunk_bytes=PART)
    header = update_header("client-a", model, round, g + np.float32(1), 5, **{field: value})
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.BeginUpload(pb.BeginUploadRequest(header=header), timeout=RPC_TIMEOUT)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    nothing_changed(coord, round)
