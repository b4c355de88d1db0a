"""Join is bounded: sizes of what it carries (INVALID_ARGUMENT), its rate per client and per peer
address (RESOURCE_EXHAUSTED with retry-after), and client strings never reach logs unbounded."""

from __future__ import annotations

import logging
import sqlite3

import grpc
import pytest

from coordinator_fixtures import RPC_TIMEOUT, mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.protos.stubs import fedort_v1_pb2 as pb


def client_rows(state_dir) -> int:
    con = sqlite3.connect(state_dir / "state.db")
    try:
        return con.execute("SELECT COUNT(*) FROM clients").fetchone()[0]
    finally:
        con.close()


async def join(client, **fields):
    return await client.stub.Join(pb.JoinRequest(**fields), timeout=RPC_TIMEOUT)


async def test_a_long_device_name_is_refused_and_not_stored(start_coordinator, stub_client, tmp_path):
    coordinator = await start_coordinator()
    client = stub_client(coordinator.port)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await join(client, client_id="a", device_name="n" * 4096)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "device_name must be at most 128 bytes, got 4096" in err.value.details()
    assert client_rows(tmp_path / "state") == 0


@pytest.mark.slow
async def test_a_megabyte_join_is_refused_unparsed_and_not_stored(start_coordinator, stub_client, tmp_path):
    coordinator = await start_coordinator()
    client = stub_client(coordinator.port)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await join(client, client_id="a", device_name="n" * (1 << 20))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Join requests must be at most 262144 bytes, got 1048583 (unparsed)" in err.value.details()
    assert client_rows(tmp_path / "state") == 0


async def test_ten_thousand_capabilities_are_refused(start_coordinator, stub_client):
    coordinator = await start_coordinator()
    client = stub_client(coordinator.port)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await join(client, client_id="a", capabilities={f"k{i}": "v" for i in range(10_000)})
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "at most 64 capabilities per Join, got 10000" in err.value.details()


async def test_oversized_capability_values_and_totals_are_refused(start_coordinator, stub_client):
    coordinator = await start_coordinator()
    client = stub_client(coordinator.port)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await join(client, client_id="a", capabilities={"os": "x" * 257})
    assert "capability values must be at most 256 bytes, got 257" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await join(client, client_id="a", capabilities={f"k{i:02d}": "v" * 200 for i in range(30)})
    assert "capabilities must total at most 4096 bytes" in err.value.details()
    reply = await join(client, client_id="a", device_name="phone", capabilities={"os": "android"})
    assert reply.client_id == "a"


@pytest.mark.slow
async def test_joins_beyond_the_per_client_rate_are_resource_exhausted_with_retry_after(start_coordinator, stub_client):
    coordinator = await start_coordinator(joins_per_minute=3)
    client = stub_client(coordinator.port)
    for _ in range(3):
        await join(client, client_id="a")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await join(client, client_id="a")
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "exceeded 3 joins per minute; retry in" in err.value.details()
    retry_after = err.value.trailing_metadata()["retry-after"]
    assert 0 < float(retry_after) <= 20
    assert (await join(client, client_id="b")).client_id == "b"    # another client is not held back


async def test_joins_beyond_the_per_address_rate_are_resource_exhausted(start_coordinator, stub_client):
    coordinator = await start_coordinator(joins_per_minute=0, joins_per_minute_per_address=3)
    client = stub_client(coordinator.port)
    for cid in ("a", "b", "c"):
        await join(client, client_id=cid)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await join(client, client_id="d")     # a fresh id does not escape the address's bucket
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "address ipv4:127.0.0.1 exceeded 3 joins per minute" in err.value.details()


async def test_client_strings_reach_logs_and_messages_truncated(start_coordinator, stub_client, caplog):
    coordinator = await start_coordinator()
    client = stub_client(coordinator.port)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await join(client, client_id="!" * 100_000)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(err.value.details()) < 1100 and "(+99920 chars)" in err.value.details()
    assert "!" * 1000 not in caplog.text
