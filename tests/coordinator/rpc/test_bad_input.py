"""Bad input, one class at a time: each gets its status code, and changes nothing durable.

"Nothing" is `chaos_support.state_snapshot`: the SQLite dump (`StateStore.dump()`), every
global vector file byte for byte, and the spool listing. The complete list of the classes the
reliability issue names, and where each is tested (tests/coordinator/rpc/test_servicer.py holds the first 19
SubmitUpdate cases, which check the same snapshot; test_bad_input_inventory.py and
test_codec_payload_inventory.py hold the case-by-case inventory over every RPC and codec, with token auth):

| class | status | test |
| --- | --- | --- |
| wrong length | INVALID_ARGUMENT | test_servicer[wrong length] |
| wrong dtype | INVALID_ARGUMENT | test_servicer[dtype float64], [unknown codec] |
| NaN | INVALID_ARGUMENT | test_servicer[non-finite values] |
| Inf | INVALID_ARGUMENT | here: test_infinite_values_are_rejected[+inf, -inf] |
| truncated stream | INVALID_ARGUMENT / none (peer gone) | test_servicer[stream too short]; here: test_upload_cut_off_mid_stream_leaves_nothing |
| bad sha256 | INVALID_ARGUMENT | test_servicer[sha256 mismatch], [short sha256] |
| oversize | RESOURCE_EXHAUSTED | test_servicer[chunk over the limit], test_vector_over_the_length_limit...; here: test_message_over_the_transport_limit... |
| stale round | FAILED_PRECONDITION | here: test_update_for_a_committed_round_is_stale |
| future round | FAILED_PRECONDITION | test_servicer[round not open], test_stale_round_message_names_the_open_round |
| duplicate | OK, duplicate=True | here: test_duplicate_is_acknowledged_and_changes_nothing (test_servicer checks the count) |
| unknown client | NOT_FOUND | test_servicer[unknown client]; here: test_unknown_client_on_every_rpc |
| bad credential | UNAUTHENTICATED | here: test_bad_credential_is_unauthenticated; tests/coordinator/rpc/test_auth.py in depth |
| wrong model id | FAILED_PRECONDITION | test_servicer[wrong model id]; here: test_wrong_model_on_every_rpc |
| garbage bytes | INVALID_ARGUMENT | here: test_garbage_bytes_where_a_message_is_expected[every method] |
| a header without chunks | INVALID_ARGUMENT | here: test_header_without_chunks |
| chunks without a header | INVALID_ARGUMENT | test_servicer[no header first]; here: test_chunks_without_a_header_on_the_raw_wire |
"""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest

from chaos_support import (
    METHODS, cut_off_after_first_chunk, open_access, raw_call, round_one_open, state_snapshot,
)
from coordinator_fixtures import (  # noqa: F401
    P_MLP, chunks_of, mlp_artifacts, start_coordinator, stub_client, update_header,
)
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc

INVALID, PRECONDITION, NOT_FOUND, EXHAUSTED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
                                               grpc.StatusCode.NOT_FOUND, grpc.StatusCode.RESOURCE_EXHAUSTED)
CHUNK = 16384


@pytest.fixture
async def open_round(start_coordinator, stub_client):
    """Round 1 of 2 open with client-a and client-b selected; client-a holds the round's vector."""
    return await round_one_open(start_coordinator, stub_client, max_examples=1000, max_chunk_bytes=CHUNK,
                                round_timeout_s=240, **open_access())


async def rejected(call, code: grpc.StatusCode) -> str:
    """Await `call`, expect it to fail with `code`; the server's message."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, (err.value.code(), err.value.details())
    assert err.value.details()
    return err.value.details()


async def still_accepts(client, model: str, vector: np.ndarray, cid: str = "client-a") -> None:
    reply = await client.submit(cid, model, 1, vector, 10, chunks=chunks_of(vector, CHUNK))
    assert reply.accepted and not reply.duplicate


@pytest.mark.parametrize("value", [np.inf, -np.inf], ids=["+inf", "-inf"])
async def test_infinite_values_are_rejected(open_round, value):
    coord, client, model, vector = open_round
    bad = vector.copy()
    bad[123] = value
    before = state_snapshot(coord)
    message = await rejected(client.submit("client-a", model, 1, bad, 10, chunks=chunks_of(bad, CHUNK)), INVALID)
    assert "non-finite" in message
    assert state_snapshot(coord) == before
    await still_accepts(client, model, vector)


async def test_header_without_chunks(open_round):
    coord, client, model, vector = open_round
    before = state_snapshot(coord)
    message = await rejected(client.submit("client-a", model, 1, vector, 10, chunks=[]), INVALID)
    assert f"after 0 of {4 * P_MLP} bytes" in message
    assert state_snapshot(coord) == before
    await still_accepts(client, model, vector)


async def test_chunks_without_a_header_on_the_raw_wire(open_round):
    coord, client, model, vector = open_round
    before = state_snapshot(coord)
    parts = [pb.UpdatePart(chunk=c).SerializeToString() for c in chunks_of(vector, CHUNK)]
    await rejected(raw_call(client.channel, "SubmitUpdate")(iter(parts), timeout=10), INVALID)
    assert state_snapshot(coord) == before


@pytest.mark.slow
async def test_upload_cut_off_mid_stream_leaves_nothing(open_round):
    """A client that dies mid-upload (stream cancelled): no row, no spool file, and it may send again."""
    coord, client, model, vector = open_round
    before = state_snapshot(coord)
    await cut_off_after_first_chunk(coord, client, model, vector, CHUNK)
    assert state_snapshot(coord) == before
    await still_accepts(client, model, vector)


async def test_message_over_the_transport_limit_is_resource_exhausted(open_round):
    """A single message larger than the server's receive limit never reaches the servicer."""
    coord, client, model, vector = open_round
    before = state_snapshot(coord)
    huge = b"\0" * (8 << 20)
    parts = [pb.UpdatePart(header=update_header("client-a", model, 1, vector, 10)), pb.UpdatePart(chunk=huge)]
    await rejected(client.submit_parts(parts), EXHAUSTED)
    assert state_snapshot(coord) == before
    await still_accepts(client, model, vector)


def round_exported(coord, round: int) -> bool:
    row = next((r for r in coord.engine.store.rounds() if r.round == round), None)
    return row is not None and row.state == "EXPORTED" and not (coord.state_dir / "spool" / f"round-{round:04d}").exists()


@pytest.mark.slow
async def test_update_for_a_committed_round_is_stale(open_round):
    coord, client, model, vector = open_round
    await still_accepts(client, model, vector, "client-a")
    await still_accepts(client, model, vector, "client-b")
    # round 2 open and round 1's background export done (it marks the row and drops the spool)
    for _ in range(500):
        if coord.engine.round == 2 and coord.engine.state.name == "TRAINING" and round_exported(coord, 1):
            break
        await asyncio.sleep(0.02)
    assert (await client.poll("client-a", model)).round == 2
    await coord.engine.exports_done()   # round 1's background export (and spool deletion) is not the refusal's doing
    before = state_snapshot(coord)
    message = await rejected(client.submit("client-a", model, 1, vector + 1, 10,
                                           chunks=chunks_of(vector + 1, CHUNK)), PRECONDITION)
    assert message == "round 1 is not open for updates; the open round is 2"
    assert state_snapshot(coord) == before


async def test_duplicate_is_acknowledged_and_changes_nothing(open_round):
    coord, client, model, vector = open_round
    await still_accepts(client, model, vector)
    before = state_snapshot(coord)
    other = vector + np.float32(7)
    reply = await client.submit("client-a", model, 1, other, 10, chunks=chunks_of(other, CHUNK))
    assert reply.accepted and reply.duplicate
    assert state_snapshot(coord) == before


async def test_unknown_client_on_every_rpc(open_round):
    coord, client, model, vector = open_round
    before = state_snapshot(coord)
    s, nobody = client.stub, "nobody"
    calls = {
        "PollTask": s.PollTask(pb.PollRequest(client_id=nobody, model_id=model, wait_ms=0), timeout=5),
        "DownloadVector": _drain(s.DownloadVector(pb.VectorRequest(client_id=nobody, model_id=model, round=1), timeout=5)),
        "DownloadArtifact": _drain(s.DownloadArtifact(
            pb.ArtifactRequest(client_id=nobody, model_id=model, name="checkpoint"), timeout=5)),
        "SubmitEvaluation": s.SubmitEvaluation(pb.EvaluationResult(client_id=nobody, model_id=model, round=1,
                                                                   num_examples=1), timeout=5),
        "Heartbeat": s.Heartbeat(pb.HeartbeatRequest(client_id=nobody), timeout=5),
        "Leave": s.Leave(pb.LeaveRequest(client_id=nobody), timeout=5),
        "SubmitUpdate": client.submit(nobody, model, 1, vector, 10, chunks=chunks_of(vector, CHUNK)),
    }
    for name, call in calls.items():
        message = await rejected(call, NOT_FOUND)
        assert "nobody" in message, (name, message)
    assert state_snapshot(coord) == before


async def test_wrong_model_on_every_rpc(open_round):
    coord, client, model, vector = open_round
    before = state_snapshot(coord)
    s, other = client.stub, "f" * 64
    calls = [
        s.PollTask(pb.PollRequest(client_id="client-a", model_id=other, wait_ms=0), timeout=5),
        _drain(s.DownloadVector(pb.VectorRequest(client_id="client-a", model_id=other, round=1), timeout=5)),
        _drain(s.DownloadArtifact(pb.ArtifactRequest(client_id="client-a", model_id=other, name="checkpoint"),
                                  timeout=5)),
        s.SubmitEvaluation(pb.EvaluationResult(client_id="client-a", model_id=other, round=3, num_examples=1), timeout=5),
        client.submit("client-a", other, 1, vector, 10, chunks=chunks_of(vector, CHUNK)),
    ]
    for call in calls:
        await rejected(call, PRECONDITION)
    assert state_snapshot(coord) == before
    await still_accepts(client, model, vector)


GARBAGE = {
    "invalid wire type": b"\xff\xff\xff",
    "truncated varint": b"\x80",
    "length past the end": b"\x0a\xff\xff\xff\xff\x0f",
}


@pytest.mark.slow
@pytest.mark.parametrize("method", list(METHODS))
async def test_garbage_bytes_where_a_message_is_expected(open_round, method):
    """Bytes that are no protobuf message: INVALID_ARGUMENT on every method (grpc alone says UNKNOWN)."""
    coord, client, model, vector = open_round
    before = state_snapshot(coord)
    call = raw_call(client.channel, method)
    for garbage in GARBAGE.values():
        if method == "SubmitUpdate":
            header = pb.UpdatePart(header=update_header("client-a", model, 1, vector, 10)).SerializeToString()
            for parts in ([garbage], [header, garbage]):
                message = await rejected(call(iter(parts), timeout=5), INVALID)
                assert "not a valid protobuf message" in message
        else:
            message = await rejected(_drain(call(garbage, timeout=5)) if METHODS[method][1] else call(garbage, timeout=5),
                                     INVALID)
            assert "not a valid protobuf message" in message
    assert state_snapshot(coord) == before
    assert (await client.stub.Status(pb.StatusRequest(), timeout=5)).current_round == 1
    await still_accepts(client, model, vector)


@pytest.mark.slow
async def test_bad_credential_is_unauthenticated(start_coordinator, tmp_path):
    """Token auth (tests/coordinator/rpc/test_auth.py covers it in depth): a wrong token on an open round changes nothing."""
    from fedort.coordinator.rpc.devices import DeviceStore

    state = tmp_path / "state"
    token = DeviceStore(state).enroll("client-a")[1]
    coord = await start_coordinator(auth="token", state_dir=state, max_chunk_bytes=CHUNK, round_timeout_s=240)
    good, bad = (("authorization", f"Bearer {token}"),), (("authorization", f"Bearer {token[:-2]}xx"),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{coord.port}") as channel:
        stub = pb_grpc.CoordinatorStub(channel)
        model = (await stub.Join(pb.JoinRequest(client_id="client-a"), metadata=good, timeout=10)).model_id
        before = state_snapshot(coord)
        header = update_header("client-a", model, 1, np.zeros(P_MLP, np.float32), 10)
        for call in (stub.Join(pb.JoinRequest(client_id="client-a"), metadata=bad, timeout=10),
                     stub.Heartbeat(pb.HeartbeatRequest(client_id="client-a"), metadata=bad, timeout=10),
                     stub.Join(pb.JoinRequest(client_id="client-a", credential="not-a-token"), timeout=10),
                     stub.SubmitUpdate(iter([pb.UpdatePart(header=header)]), metadata=bad, timeout=10)):
            await rejected(call, grpc.StatusCode.UNAUTHENTICATED)
        assert state_snapshot(coord) == before


async def _drain(stream) -> list:
    return [part async for part in stream]
