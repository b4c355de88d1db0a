"""The packed masked-upload codec `secagg-packed:b`: b/8 bytes a masked word instead of 8, exact, its
malformed forms refused with INVALID_ARGUMENT and nothing changed, and `secagg-u64` still accepted."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import numpy as np
import pytest

from fedort.coordinator import RoundState
from fedort.coordinator.aggregation import decoder_for
from fedort.common.errors import FedortError, VectorError
from fedort.common.secagg.pack import add_packed, pack, packed_codec, payload_size, unpack
from fedort.common.secagg.task import SECAGG_CODEC, SecAggTask

from coordinator_fixtures import P_MLP, mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from secagg_devices import deltas_for, run_devices
from test_secagg_round import _quantized_mean, _vectors


@pytest.mark.parametrize("bits", [8, 16, 24, 32, 40, 48, 56, 64])
def test_packed_words_unpack_to_exactly_the_masked_words(bits):
    words = np.random.default_rng(bits).integers(0, 2**bits - 1, size=1001, dtype=np.uint64, endpoint=True)
    payload = pack(words, packed_codec(bits))
    assert len(payload) == bits // 8 * 1001 == payload_size(packed_codec(bits), 1000)
    assert np.array_equal(unpack(payload, packed_codec(bits), 1000), words)


@pytest.mark.parametrize("bits", [8, 24, 32, 40])
def test_a_packed_word_is_its_low_b_over_8_bytes_little_endian(bits):
    words = np.array([0x0807060504030201 & (2**bits - 1), 2**bits - 1, 0], dtype=np.uint64)
    width = bits // 8
    assert pack(words, packed_codec(bits)) == bytes(range(1, width + 1)) + b"\xff" * width + bytes(width)


@pytest.mark.parametrize("bits", [8, 16, 24, 32])
def test_uint32_words_pack_to_the_bytes_of_the_same_uint64_words(bits):
    words = np.random.default_rng(bits).integers(0, 2**bits - 1, size=1001, dtype=np.uint64, endpoint=True)
    for codec in (packed_codec(bits), SECAGG_CODEC):
        assert pack(words.astype(np.uint32), codec) == pack(words, codec)


@pytest.mark.parametrize("bits", [8, 16, 24, 32, 40, 56, 64])
@pytest.mark.parametrize("length", [1, 2, 6, 1000])
def test_a_payload_added_as_it_arrived_sums_to_its_unpacked_words_mod_2b(bits, length):
    rng = np.random.default_rng(bits + length)
    words = rng.integers(0, 2**bits - 1, size=length + 1, dtype=np.uint64, endpoint=True)
    start = rng.integers(0, 2**bits - 1, size=length + 1, dtype=np.uint64, endpoint=True)
    acc = start.copy()
    add_packed(acc, pack(words, packed_codec(bits)), packed_codec(bits), length)
    mask = np.uint64(2**bits - 1)
    assert np.array_equal(acc & mask, (start + words) & mask)
    with pytest.raises(VectorError, match="bytes, expected"):
        add_packed(acc, pack(words, packed_codec(bits))[:-1], packed_codec(bits), length)


def test_the_packed_payload_is_b_over_8_bytes_per_word_and_nothing_else():
    dec = decoder_for("secagg-packed:40")
    assert dec.payload_bytes(P_MLP, 0) == dec.payload_bytes(P_MLP, 5 * (P_MLP + 1)) == 5 * (P_MLP + 1)
    with pytest.raises(VectorError, match="5 bytes"):
        dec.payload_bytes(P_MLP, 8 * (P_MLP + 1))
    assert decoder_for(SECAGG_CODEC).payload_bytes(P_MLP, 0) == 8 * (P_MLP + 1)       # the old codec stays


@pytest.mark.parametrize("spec", ["secagg-packed", "secagg-packed:41", "secagg-packed:0", "secagg-packed:72",
                                  "secagg-packed:+8", "secagg-u64:8"])
def test_a_malformed_masked_codec_spec_is_refused(spec):
    with pytest.raises(VectorError, match="secagg"):
        decoder_for(spec)


def test_a_task_naming_no_codec_means_secagg_u64_as_older_coordinators_sent():
    from secagg_support import make_params

    task = SecAggTask(make_params(3, 10), codec=SECAGG_CODEC)
    old = json.loads(task.to_bytes())
    del old["codec"]
    assert SecAggTask.from_bytes(json.dumps(old).encode()).codec == SECAGG_CODEC


class MalformedFirst:
    """A device's transport that first sends its masked upload in malformed forms (each must fail with
    INVALID_ARGUMENT), then the real one."""

    def __init__(self, transport) -> None:
        self.transport, self.refusals = transport, []

    def __getattr__(self, name):
        return getattr(self.transport, name)

    def submit_update(self, header, payload):
        meta, bits = header.vector, int(header.vector.codec.split(":")[1])
        wider = pack(unpack(payload, meta.codec, meta.length), packed_codec(bits + 8)) if bits < 64 else payload + payload
        tampered = bytes([payload[0] ^ 1]) + payload[1:]
        for h, body in [
            (replace(header, vector=replace(meta, codec=packed_codec(bits + 8) if bits < 64 else "secagg-packed:56",
                                            payload_bytes=len(wider))), wider),    # another b than the round's
            (replace(header, vector=replace(meta, codec="secagg-packed:44")), payload),   # b not whole bytes
            (replace(header, vector=replace(meta, payload_bytes=len(payload) + 8)), payload + bytes(8)),  # size
            (header, payload[:-3]),                                                 # stream ends early
            (header, tampered),                                                     # sha256 mismatch
        ]:
            try:
                self.transport.submit_update(h, body)
                self.refusals.append("accepted")
            except FedortError as e:
                self.refusals.append(getattr(e, "code", type(e).__name__))
        return self.transport.submit_update(header, payload)


class OlderDevice:
    """A device from before `secagg-packed`: it reads no codec in the task, so it sends secagg-u64."""

    def __init__(self, transport) -> None:
        self.transport = transport

    def __getattr__(self, name):
        return getattr(self.transport, name)

    def poll(self, *a, **kw):
        task = self.transport.poll(*a, **kw)
        if task.secagg:
            spec = json.loads(task.secagg)
            assert spec.pop("codec").startswith("secagg-packed:")
            task = replace(task, secagg=json.dumps(spec).encode())
        return task

    def submit_update(self, header, payload):
        assert header.vector.codec == SECAGG_CODEC and len(payload) == 8 * (header.vector.length + 1)
        return self.transport.submit_update(header, payload)


async def _commits_the_exact_average(coord, stub_client, ids, deltas, examples) -> None:
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    client = stub_client(coord.port)
    model = (await client.join(ids[0])).model_id
    start, final = await _vectors(coord, client, ids[0], model)
    np.testing.assert_allclose(final, start.astype(np.float64) + _quantized_mean(deltas, ids, examples), atol=1e-6)


@pytest.mark.slow
async def test_malformed_packed_uploads_are_refused_and_change_nothing(start_coordinator, stub_client):
    ids = [f"dev-{i:02d}" for i in range(4)]
    coord = await start_coordinator(rounds=1, min_clients=4, secagg=True, round_timeout_s=30)
    deltas, examples = deltas_for(ids, P_MLP, seed=5), {c: 10 + i for i, c in enumerate(ids)}
    wrapped: list[MalformedFirst] = []
    wraps = {ids[1]: lambda t: wrapped.append(MalformedFirst(t)) or wrapped[-1]}
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas, None, examples, 1, wraps)
    assert wrapped[0].refusals == ["INVALID_ARGUMENT"] * 5
    assert all(o == [("accepted", "accepted")] for o in outcomes.values()), outcomes
    await _commits_the_exact_average(coord, stub_client, ids, deltas, examples)


@pytest.mark.slow
async def test_secagg_u64_uploads_of_older_devices_sum_exactly_with_packed_ones(start_coordinator, stub_client):
    ids = [f"dev-{i:02d}" for i in range(4)]
    coord = await start_coordinator(rounds=1, min_clients=4, secagg=True, round_timeout_s=30)
    deltas, examples = deltas_for(ids, P_MLP, seed=6), {c: 10 + 3 * i for i, c in enumerate(ids)}
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas, None, examples, 1,
                                       {c: OlderDevice for c in ids[:2]})
    assert all(o == [("accepted", "accepted")] for o in outcomes.values()), outcomes
    await _commits_the_exact_average(coord, stub_client, ids, deltas, examples)
