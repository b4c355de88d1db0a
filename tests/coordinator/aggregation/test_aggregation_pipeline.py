"""The aggregation pipeline's plug-in points: decoder registry, round aggregator, server-update state,
and the round transitions the engine records — each through the real coordinator where it matters."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Mapping

import numpy as np
import pytest

from fedort.coordinator import Coordinator, RoundState
from fedort.coordinator.aggregation import (
    Decoder, FedAvg, Median, ServerUpdate, Strategy, Update, WeightedSum, codecs, decoder_for, register_decoder,
)
from fedort.coordinator.aggregation.weighted_sum import WeightedMean
from fedort.coordinator.state.layout import StateLayout
from fedort.coordinator.status import offline_status, round_timeline
from coordinator_fixtures import (  # noqa: F401
    make_config, manual_clock, mlp_artifacts, pass_the_deadline, start_coordinator, stub_client,
)
from fedort.common.errors import VectorError


def _vectors(n: int, length: int = 70_000, seed: int = 0) -> list[np.ndarray]:   # > one 2**16 fold block
    rng = np.random.default_rng(seed)
    return [rng.normal(size=length).astype(np.float32) for _ in range(n)]


def _spooled(tmp_path: Path, vectors, weights, in_memory: bool) -> list[Update]:
    out = []
    for i, (v, w) in enumerate(zip(vectors, weights)):
        path = tmp_path / f"client-{i:04d}.f32"
        v.tofile(path)
        out.append(Update(f"client-{i:04d}", int(w), "raw", path, payload=v if in_memory else None))
    return out


@pytest.mark.parametrize("in_memory", [True, False], ids=["payload", "spool-file"])
def test_a_fedavg_round_equals_the_weighted_sum_bit_for_bit(tmp_path, in_memory):
    vectors, weights = _vectors(5), [3, 1, 4, 1, 5]
    agg = FedAvg().new_round(np.zeros(70_000, np.float32))
    for u in _spooled(tmp_path, vectors, weights, in_memory):
        agg.add(u)
    expected = WeightedSum(70_000, np.dtype(np.float64))
    for v, w in zip(vectors, weights):
        expected.add(v, w)
    result = agg.result()
    np.testing.assert_array_equal(result.vector, expected.mean())
    assert (result.updates, result.examples) == (5, 14)


def test_a_spool_combiner_reads_the_updates_in_client_order_whatever_the_arrival_order(tmp_path):
    vectors = _vectors(4, length=3000)
    updates = _spooled(tmp_path, vectors, [1, 1, 1, 1], in_memory=False)
    agg = Median().new_round(np.zeros(3000, np.float32))
    for u in reversed(updates):
        agg.add(u)
    np.testing.assert_array_equal(agg.result().vector, Median().aggregate(sorted(
        [u for u in updates], key=lambda u: u.client_id), np.zeros(3000, np.float32)))


def test_an_unknown_codec_is_refused_naming_the_registered_ones():
    with pytest.raises(VectorError, match=r"codec must be one of \[.*'raw'.*\], got 'zstd'"):
        decoder_for("zstd")


class _Negated(Decoder):
    """A test codec: the payload is −v as float32."""

    codec = "test-negated"

    def decode(self, payload: np.ndarray, length: int) -> np.ndarray:
        return -payload.view("<f4")


@pytest.mark.slow
async def test_a_registered_codec_is_admitted_and_decoded_into_the_round(start_coordinator, stub_client):
    register_decoder(_Negated())
    assert "test-negated" in codecs()
    coord = await start_coordinator(min_clients=2, rounds=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    for cid in ("client-a", "client-b"):
        task = await client.poll(cid, model)
        _, start = await client.download_vector(cid, model, task.round)
        wire = -(start + np.float32(2.0))     # the client sends −(g + 2) in the negated codec
        reply = await client.submit(cid, model, task.round, wire.astype(np.float32), 5, codec="test-negated")
        assert reply.accepted
    assert (await asyncio.wait_for(coord.wait_done(), 60)).state is RoundState.DONE
    _, final = await client.download_vector("client-a", model, 2)
    np.testing.assert_allclose(final, start + 2.0, atol=1e-5)


async def _submit_negated(client, cid: str, model: str) -> np.ndarray:
    task = await client.poll(cid, model)
    _, start = await client.download_vector(cid, model, task.round)
    wire = -(start + np.float32(2.0))
    assert (await client.submit(cid, model, task.round, wire.astype(np.float32), 5, codec="test-negated")).accepted
    return start


@pytest.mark.slow
async def test_replay_after_a_restart_decodes_each_spooled_update_with_its_recorded_codec(start_coordinator,
                                                                                          stub_client, manual_clock):
    register_decoder(_Negated())
    coord = await start_coordinator(min_clients=2, rounds=1, round_timeout_s=600, max_round_attempts=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    start = await _submit_negated(client, "client-a", model)
    await pass_the_deadline(coord, manual_clock)
    assert (await asyncio.wait_for(coord.wait_done(), 60)).state is RoundState.FAILED   # b never reported
    await coord.stop(grace=0)
    again = await start_coordinator(min_clients=2, rounds=1, round_timeout_s=10, max_round_attempts=1)
    client = stub_client(again.port)
    await client.join("client-b")
    await _submit_negated(client, "client-b", model)
    assert (await asyncio.wait_for(again.wait_done(), 60)).state is RoundState.DONE
    _, final = await client.download_vector("client-b", model, 2)
    np.testing.assert_allclose(final, start + 2.0, atol=1e-5)     # both decoded, a's from the spool


class _CountingServerUpdate(ServerUpdate):
    """g' = c, counting its applications in durable state (the shape of FedAvgM / FedAdam's state)."""

    name = "counting"

    def __init__(self) -> None:
        self.steps = 0
        self.loaded: dict[str, np.ndarray] | None = None

    def apply(self, global_vector: np.ndarray, combined: np.ndarray) -> np.ndarray:
        self.steps += 1
        return combined

    def state(self) -> Mapping[str, np.ndarray]:
        return {"steps": np.array([self.steps])}

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        self.loaded = dict(state)
        self.steps = int(state["steps"][0])


async def test_a_server_update_state_is_committed_with_its_round_and_restored_on_restart(
        tmp_path, mlp_artifacts, stub_client):
    state_dir = tmp_path / "state"
    first = _CountingServerUpdate()
    coord = Coordinator(make_config(mlp_artifacts, state_dir, min_clients=2, rounds=1),
                        strategy=Strategy("counting", WeightedMean(), server_update=first))
    try:
        await coord.start()
        client = stub_client(coord.port)
        model = (await client.join("client-a")).model_id
        await client.join("client-b")
        await client.fit_round("client-a", model, 1.0, 3)
        await client.fit_round("client-b", model, 1.0, 3)
        assert (await asyncio.wait_for(coord.wait_done(), 60)).state is RoundState.DONE
    finally:
        await asyncio.wait_for(coord.stop(grace=0), 20)
    assert StateLayout(state_dir).server_state(2).is_file() and first.steps == 1
    second = _CountingServerUpdate()
    again = Coordinator(make_config(mlp_artifacts, state_dir, min_clients=2, rounds=2),
                        strategy=Strategy("counting", WeightedMean(), server_update=second))
    try:
        await again.start()                 # recovery resumes at round 2 with round 2's starting state
        assert again.engine.round == 2 and second.steps == 1 and list(second.loaded) == ["steps"]
    finally:
        await asyncio.wait_for(again.stop(grace=0), 20)


async def test_every_round_transition_is_recorded_with_its_time(start_coordinator, stub_client, tmp_path):
    coord = await start_coordinator(min_clients=2, rounds=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.fit_round("client-a", model, 1.0, 3)
    await client.fit_round("client-b", model, 1.0, 3)
    assert (await asyncio.wait_for(coord.wait_done(), 60)).state is RoundState.DONE
    await coord.stop(grace=0)
    timeline = round_timeline(tmp_path / "state")
    assert [(t.round, t.from_state, t.to_state) for t in timeline] == [
        (1, "WAITING_FOR_CLIENTS", "TRAINING"), (1, "TRAINING", "AGGREGATING"), (1, "AGGREGATING", "EXPORTING"),
        (2, "EXPORTING", "DONE")]
    times = [t.at_unix_s for t in timeline]
    assert times == sorted(times)


class _BrokenFold(WeightedMean):
    """A plug-in combiner whose fold fails (a bug in user code), in the fold worker thread."""

    def fold(self, blocks, weight: float) -> None:
        raise RuntimeError("broken combiner: cannot fold")


async def test_an_exception_in_the_fold_thread_ends_the_run_failed_naming_it(tmp_path, mlp_artifacts, stub_client):
    state_dir = tmp_path / "state"
    coord = Coordinator(make_config(mlp_artifacts, state_dir, min_clients=2, rounds=2),
                        strategy=Strategy("broken", _BrokenFold()))
    try:
        await coord.start()
        client = stub_client(coord.port)
        model = (await client.join("client-a")).model_id
        await client.join("client-b")
        await client.fit_round("client-a", model, 1.0, 3)      # acknowledged once durable; the fold fails after
        await client.fit_round("client-b", model, 1.0, 3)
        outcome = await asyncio.wait_for(coord.wait_done(), 30)
    finally:
        await asyncio.wait_for(coord.stop(grace=0), 20)
    assert outcome.state is RoundState.FAILED and outcome.rounds_completed == 0
    assert "RuntimeError: broken combiner: cannot fold" in outcome.message
    status = offline_status(state_dir)                          # recorded, not only in memory
    assert status.state is RoundState.FAILED and "broken combiner" in status.message


def test_an_early_fold_that_fails_part_way_or_is_never_counted_is_refolded_away(tmp_path):
    """fold_early (a co-located update folded while it is checked) then a failure: the round is `stale`, and
    `rebuild` from the counted updates gives the bits of a round that never saw the failed ones."""
    vectors, weights = _vectors(4), [3, 1, 4, 2]
    updates = _spooled(tmp_path, vectors, weights, in_memory=False)
    clean = FedAvg().new_round(np.zeros(70_000, np.float32))
    for u in updates[:2]:
        clean.add(u)
    agg = FedAvg().new_round(np.zeros(70_000, np.float32))
    assert agg.folds_early
    agg.fold_early("a", iter([(0, vectors[0])]), weights[0])
    assert agg.stale                           # folded, not yet counted
    agg.add(updates[0], early="a")
    assert not agg.stale

    def refused_after_the_first_block():       # as a non-finite second block or a digest mismatch at the end
        yield 0, vectors[2][:65_536]
        raise VectorError("payload contains a non-finite value")

    with pytest.raises(VectorError):
        agg.fold_early("b", refused_after_the_first_block(), weights[2])
    agg.fold_early("c", iter([(0, vectors[3])]), weights[3])   # checked, but its group commit failed: never added
    agg.add(updates[1])                                        # an update folded the usual way
    assert agg.stale
    agg.rebuild(updates[:2])
    assert not agg.stale
    assert agg.result().vector.tobytes() == clean.result().vector.tobytes()


def test_a_spool_combiner_does_not_fold_early():
    assert not Median().new_round(np.zeros(10, np.float32)).folds_early
