"""The upload path under secure aggregation: masked (`secagg-u64`) updates exactly when the run uses
--secagg, and the masked codec's payload is sized 8·(P+1) bytes and never checked as float values."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from fedort.coordinator.aggregation import decoder_for
from fedort.coordinator.uploads.admission import allowed_codecs
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.common.errors import VectorError
from fedort.common.secagg.task import SECAGG_CODEC

from coordinator_fixtures import P_MLP, make_config, mlp_artifacts, start_coordinator, stub_client  # noqa: F401


def _masked_words(length: int) -> np.ndarray:
    """A masked upload's P + 1 uint64 words as the float32 view the stream sends (many are NaN patterns)."""
    words = np.random.default_rng(0).integers(0, 2**64, size=length + 1, dtype=np.uint64)
    words[:4] = 0xFFFFFFFFFFFFFFFF   # as float32: NaN
    return words.view("<f4")


async def test_a_masked_upload_is_refused_by_a_run_without_secagg(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=1, rounds=1)
    client = stub_client(coord.port)
    model = (await client.join("dev-a")).model_id
    task = await client.poll("dev-a", model)
    assert task.kind == pb.Task.FIT
    wire = _masked_words(P_MLP)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit("dev-a", model, task.round, wire, 10, length=P_MLP, codec=SECAGG_CODEC,
                            payload_bytes=wire.nbytes)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "secure aggregation" in e.value.details()


async def test_a_clear_update_is_refused_by_a_secagg_run(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=2, rounds=1, secagg=True, round_timeout_s=30)
    client = stub_client(coord.port)
    model = (await client.join("dev-a")).model_id
    await client.join("dev-b")                  # a secure sum needs a cohort of >= 2
    task = await client.poll("dev-a", model)
    assert task.kind == pb.Task.FIT and task.secagg
    _, g = await client.download_vector("dev-a", model, task.round)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit("dev-a", model, task.round, g, 10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert SECAGG_CODEC in e.value.details() and "clear" in e.value.details()


def test_the_masked_payload_is_8_bytes_per_value_plus_the_weight_and_nothing_else():
    dec = decoder_for(SECAGG_CODEC)
    assert dec.payload_bytes(P_MLP, 0) == dec.payload_bytes(P_MLP, 8 * (P_MLP + 1)) == 8 * (P_MLP + 1)
    with pytest.raises(VectorError, match="8|uint64"):
        dec.payload_bytes(P_MLP, 4 * P_MLP)      # a raw float32-sized payload is not a masked one


def test_masked_words_are_validated_as_bytes_not_as_floats():
    dec = decoder_for(SECAGG_CODEC)
    wire = _masked_words(P_MLP)
    stream = dec.stream(P_MLP, wire.nbytes)
    assert stream.feed(wire.tobytes()) == [] and stream.finish() == []   # NaN-looking words are fine
    words = dec.decode(np.frombuffer(wire.tobytes(), dtype=np.uint8), P_MLP)
    assert words.dtype == np.dtype("<u8") and len(words) == P_MLP + 1


def test_the_masked_codec_is_not_offered_to_devices_as_an_upload_codec(mlp_artifacts, tmp_path):
    allowed = allowed_codecs(make_config(mlp_artifacts, state_dir=tmp_path / "s"))
    assert SECAGG_CODEC not in allowed and not any(c.startswith("secagg-packed") for c in allowed)
