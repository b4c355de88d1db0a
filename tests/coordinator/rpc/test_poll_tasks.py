"""PollTasks: one long-poll for many clients answers only the clients that have work.

Real coordinators on 127.0.0.1:0; round 1 open with client-a and client-b selected, client-c
joined later (not selected).
"""

from __future__ import annotations

import grpc
import pytest

from coordinator_fixtures import RPC_TIMEOUT, mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.coordinator.engine.task_dispatch import MAX_POLL_IDS
from fedort.protos.stubs import fedort_v1_pb2 as pb
from test_auth import bearer, join_both, secured  # noqa: F401
from test_servicer import open_round  # noqa: F401


def request(ids, model, wait_ms=0) -> pb.PollTasksRequest:
    return pb.PollTasksRequest(client_ids=list(ids), model_id=model, wait_ms=wait_ms)


@pytest.mark.slow
async def test_only_clients_with_work_are_answered_with_the_round_and_state(open_round):  # noqa: F811
    coord, client, model, _ = open_round
    reply = await client.stub.PollTasks(request(["client-a", "client-b", "client-c"], model), timeout=RPC_TIMEOUT)
    assert (reply.round, reply.state) == (1, "TRAINING")
    tasks = {t.client_id: t.task for t in reply.tasks}
    assert sorted(tasks) == ["client-a", "client-b"]
    single = await client.poll("client-a", model, 0)
    assert all(t.kind == pb.Task.FIT for t in tasks.values())
    assert tasks["client-a"] == single     # the very task PollTask answers


@pytest.mark.slow
async def test_unselected_clients_get_an_empty_answer_when_the_hold_ends(open_round):  # noqa: F811
    coord, client, model, _ = open_round
    reply = await client.stub.PollTasks(request(["client-c"], model, wait_ms=50), timeout=RPC_TIMEOUT)
    assert list(reply.tasks) == [] and reply.state == "TRAINING"


async def test_bad_requests_get_their_status(open_round):  # noqa: F811
    coord, client, model, _ = open_round
    cases = [
        (grpc.StatusCode.NOT_FOUND, request(["client-a", "nobody"], model)),
        (grpc.StatusCode.FAILED_PRECONDITION, request(["client-a"], "f" * 64)),
        (grpc.StatusCode.INVALID_ARGUMENT, request([f"c{i}" for i in range(MAX_POLL_IDS + 1)], model)),
    ]
    for code, req in cases:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.stub.PollTasks(req, timeout=RPC_TIMEOUT)
        assert err.value.code() == code, err.value.details()
    assert "at most" in (await _details(client, cases[2][1]))


async def _details(client, req) -> str:
    try:
        await client.stub.PollTasks(req, timeout=RPC_TIMEOUT)
    except grpc.aio.AioRpcError as e:
        return e.details()
    return ""


@pytest.mark.slow
async def test_an_authenticated_device_polls_only_for_itself(secured):  # noqa: F811
    coordinator, stub, tokens, _, _ = secured
    model = await join_both(stub, tokens)
    as_a = bearer(tokens["client-a"])
    own = await stub.PollTasks(request(["client-a"], model, 5000), metadata=as_a, timeout=RPC_TIMEOUT + 5)
    assert [t.client_id for t in own.tasks] == ["client-a"]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.PollTasks(request(["client-a", "client-b"], model), metadata=as_a, timeout=RPC_TIMEOUT)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "authenticated as client-a" in err.value.details() and "client-b" in err.value.details()
