"""coordinator.client_ids: new ids use a safe alphabet (no '.'), and the co-located file check matches a
client's own files exactly, so an id that is another's prefix up to a '.' never takes that one's files."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from coordinator_fixtures import (mlp_artifacts, nothing_changed, opened_round, start_coordinator,  # noqa: F401
                                  stub_client, update_header)
from fedort.coordinator.rpc.client_ids import owns_file
from fedort.coordinator.rpc.devices import DeviceStore
from fedort.protos.stubs import fedort_v1_pb2 as pb


@pytest.mark.parametrize("client_id, name, owns", [
    ("victim", "victim.0123abcd.f32", True),
    ("victim", "victim.dev.0123abcd.f32", False),       # victim.dev's file
    ("victim.dev", "victim.dev.0123abcd.f32", True),     # an older id with a '.' keeps its own files
    ("victim", "victim..f32", False),
])
def test_a_client_owns_exactly_its_own_file_names(client_id, name, owns):
    assert owns_file(client_id, name) is owns


async def test_a_device_naming_a_file_of_an_id_it_prefixes_is_refused_and_the_file_stays(start_coordinator,
                                                                                       stub_client, tmp_path):
    coord, client, model, round, g, local = await opened_round(start_coordinator, stub_client,
                                                               local_vector_dir=tmp_path / "lv")
    theirs = local / "client-a.dev.0123456789abcdef.f32"
    theirs.write_bytes(np.ascontiguousarray(g, dtype="<f4").tobytes())
    header = update_header("client-a", model, round, g, 10)
    header.local_file = theirs.name
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit_parts([pb.UpdatePart(header=header)])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "plain file name" in e.value.details()
    assert theirs.exists()
    nothing_changed(coord, round)


async def test_a_new_id_with_a_dot_is_refused_at_join(start_coordinator, stub_client):
    coord = await start_coordinator()
    client = stub_client(coord.port)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.join("victim.dev")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "a new client_id must match" in e.value.details() and "got 'victim.dev'" in e.value.details()


def test_enrolling_a_name_with_a_dot_gives_a_generated_id(tmp_path):
    device, _ = DeviceStore(tmp_path).enroll("victim.dev")
    assert device.client_id.startswith("c-") and "." not in device.client_id
