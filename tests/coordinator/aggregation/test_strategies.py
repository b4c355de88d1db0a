"""Aggregation strategies: numerics against plain numpy, bounded-memory spool reads, spec parsing,
and the round engine committing a robust aggregate over real gRPC (also after a restart)."""

from __future__ import annotations

import asyncio
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from fedort.coordinator.aggregation import (
    ClippedFedAvg, FedAvg, Krum, Median, SpooledUpdate, TrimmedMean, parse_strategy,
)
from fedort.coordinator.aggregation.clipping import clip_update
from fedort.coordinator.aggregation.robust.krum import krum_scores, krum_select, pairwise_sq_distances
from fedort.coordinator.aggregation.robust.median import coordinate_median
from fedort.coordinator.aggregation.spool import open_updates
from fedort.coordinator.aggregation.robust.trimmed_mean import trimmed_mean
from fedort.coordinator.aggregation.weighted_sum import WeightedSum
from fedort.common.round_state import RoundState
from coordinator_fixtures import (  # noqa: F401
    make_config, manual_clock, mlp_artifacts, pass_the_deadline, start_coordinator, stub_client,
)
from fedort.common.errors import ConfigError, VectorError

SMALL_BLOCK = 4096 * 4   # forces several column blocks over the 5,000-element vectors below


def _vectors(n: int, length: int = 5000, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=length).astype(np.float32) for _ in range(n)]


def _spool(tmp_path: Path, vectors, weights=None) -> list[SpooledUpdate]:
    out = []
    for i, v in enumerate(vectors):
        path = tmp_path / f"client-{i:04d}.f32"
        np.ascontiguousarray(v, dtype="<f4").tofile(path)
        out.append(SpooledUpdate(f"client-{i:04d}", path, int(weights[i]) if weights is not None else 1))
    return out


# ---- parsing --------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, kind, streaming", [
    ("fedavg", FedAvg, True), ("clip:2.5", ClippedFedAvg, True), ("median", Median, False),
    ("trimmed-mean:0.2", TrimmedMean, False), ("krum:2", Krum, False), ("multi-krum:2:5", Krum, False),
])
def test_each_spec_names_its_strategy(spec, kind, streaming):
    strategy = parse_strategy(spec)
    assert isinstance(strategy, kind) and strategy.needs_all_updates is not streaming and str(strategy) == spec


@pytest.mark.parametrize("spec, message", [
    ("mean", "unknown strategy 'mean'; expected one of fedavg | clip:NORM"),
    ("clip", "takes 1 parameter(s): expected 'clip:NORM'"),
    ("clip:0", "clipping norm NORM must be > 0"),
    ("clip:x", "clipping norm NORM must be a number, got 'x'"),
    ("trimmed-mean:0.5", "BETA (per side) must be in [0, 0.5), got '0.5'"),
    ("krum:-1", "Byzantine count F must be an integer >= 0, got '-1'"),
    ("multi-krum:2", "takes 2 parameter(s): expected 'multi-krum:F:M'"),
    ("multi-krum:2:0", "selected count M must be an integer >= 1, got '0'"),
    ("median:3", "takes 0 parameter(s)"),
])
def test_a_bad_spec_is_a_config_error_saying_what_was_expected(spec, message):
    with pytest.raises(ConfigError) as info:
        parse_strategy(spec)
    assert message in str(info.value)


def test_coordinator_config_rejects_a_bad_strategy(mlp_artifacts, tmp_path):
    with pytest.raises(ConfigError, match="unknown strategy 'krumm'"):
        make_config(mlp_artifacts, tmp_path / "state", strategy="krumm")


# ---- numerics against numpy -----------------------------------------------------------------------

@pytest.mark.parametrize("n", [7, 8])
def test_median_matches_numpy_median_for_odd_and_even_counts(n):
    vectors = _vectors(n)
    got = coordinate_median(vectors, block_bytes=SMALL_BLOCK)
    np.testing.assert_allclose(got, np.median(np.stack(vectors), axis=0), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("n, beta", [(10, 0.2), (7, 0.1), (5, 0.0), (4, 0.45)])
def test_trimmed_mean_matches_sorting_and_averaging_the_middle(n, beta):
    vectors = _vectors(n)
    k = min(int(beta * n), (n - 1) // 2)
    expected = np.sort(np.stack(vectors), axis=0)[k:n - k].mean(axis=0)
    np.testing.assert_allclose(trimmed_mean(vectors, beta, block_bytes=SMALL_BLOCK), expected, rtol=1e-5, atol=1e-6)


def test_pairwise_distances_match_numpy():
    vectors = _vectors(6)
    stacked = np.stack(vectors).astype(np.float64)
    expected = ((stacked[:, None, :] - stacked[None, :, :]) ** 2).sum(axis=2)
    np.testing.assert_allclose(pairwise_sq_distances(vectors, block_bytes=SMALL_BLOCK), expected, rtol=1e-9)


def test_krum_scores_sum_the_n_minus_f_minus_2_nearest_others():
    dist = pairwise_sq_distances(_vectors(7))
    f = 2
    expected = [sorted(np.delete(dist[i], i))[: 7 - f - 2] for i in range(7)]
    np.testing.assert_allclose(krum_scores(dist, f), [sum(e) for e in expected])


def test_krum_keeps_honest_updates_and_never_an_outlier():
    rng = np.random.default_rng(1)
    honest = [rng.normal(0, 0.1, 1000).astype(np.float32) for _ in range(8)]
    byzantine = [np.full(1000, 5.0, np.float32), np.full(1000, -5.0, np.float32)]
    chosen = krum_select(pairwise_sq_distances(honest + byzantine), f=2, m=5)
    assert len(chosen) == 5 and all(i < 8 for i in chosen)


def test_multi_krum_averages_the_selected_updates_weighted_by_examples(tmp_path):
    rng = np.random.default_rng(2)
    vectors = [rng.normal(0, 0.1, 3000).astype(np.float32) for _ in range(6)] + [np.full(3000, 9.0, np.float32)]
    weights = [10, 20, 30, 40, 50, 60, 70]
    updates = _spool(tmp_path, vectors, weights)
    got = Krum(1, 3).aggregate(updates, np.zeros(3000, np.float32))
    chosen = krum_select(pairwise_sq_distances(vectors), 1, 3)
    w = np.array([weights[i] for i in chosen], dtype=np.float64)
    expected = (np.stack([vectors[i] for i in chosen]) * w[:, None]).sum(axis=0) / w.sum()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_krum_with_m_1_returns_the_best_scored_update_itself(tmp_path):
    vectors = _vectors(6)
    best = krum_select(pairwise_sq_distances(vectors), 1, 1)[0]
    got = Krum(1).aggregate(_spool(tmp_path, vectors), np.zeros(5000, np.float32))
    np.testing.assert_array_equal(got, vectors[best])


def test_clipping_scales_a_long_delta_to_the_norm_and_keeps_its_direction():
    g = np.ones(1000, np.float32)
    delta = np.random.default_rng(3).normal(size=1000).astype(np.float32)
    clipped = clip_update(g + delta, g, 2.0)
    got = clipped.astype(np.float64) - g
    assert np.linalg.norm(got) == pytest.approx(2.0, rel=1e-5)
    np.testing.assert_allclose(got / np.linalg.norm(got), delta / np.linalg.norm(delta), atol=1e-5)


def test_clipping_leaves_a_short_delta_unchanged():
    g = np.zeros(100, np.float32)
    v = np.full(100, 0.01, np.float32)       # norm 0.1
    assert clip_update(v, g, 1.0) is v


def test_clipped_fedavg_is_the_weighted_mean_of_clipped_deltas():
    g = np.zeros(500, np.float32)
    vectors = [np.full(500, x, np.float32) for x in (0.01, 0.02, 10.0)]
    strategy, weights = ClippedFedAvg(1.0), [1, 2, 3]
    total = WeightedSum(500, np.dtype(np.float64))
    for v, w in zip(vectors, weights):
        total.add(strategy.prepare(v, g), w)
    clipped_big = 1.0 / np.sqrt(500)           # the 10.0 delta clipped to norm 1
    expected = (1 * 0.01 + 2 * 0.02 + 3 * clipped_big) / 6
    np.testing.assert_allclose(total.mean(), expected, rtol=1e-5)


def test_strategies_read_the_same_result_from_spool_files_as_from_arrays(tmp_path):
    vectors = _vectors(9, length=3000)
    updates = _spool(tmp_path, vectors)
    g = np.zeros(3000, np.float32)
    np.testing.assert_array_equal(Median().aggregate(updates, g), coordinate_median(vectors))
    np.testing.assert_array_equal(TrimmedMean(0.2).aggregate(updates, g), trimmed_mean(vectors, 0.2))


def test_a_spool_file_of_the_wrong_size_is_refused(tmp_path):
    updates = _spool(tmp_path, _vectors(2, length=100))
    with pytest.raises(VectorError, match="holds 400 bytes, expected 404"):
        open_updates(updates, 101)


# ---- bounded memory -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def big_spool(tmp_path_factory) -> list[SpooledUpdate]:
    """20 spooled updates of 2 M parameters (160 MB on disk)."""
    folder = tmp_path_factory.mktemp("big-spool")
    rng = np.random.default_rng(0)
    block = rng.normal(size=1 << 16).astype(np.float32)
    updates = []
    for i in range(20):
        path = folder / f"client-{i:04d}.f32"
        np.tile(block + np.float32(i), 32).tofile(path)       # 32 × 65,536 = 2,097,152 parameters
        updates.append(SpooledUpdate(f"client-{i:04d}", path, 1))
    return updates


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [Median(), TrimmedMean(0.2), Krum(2, 5)], ids=str)
def test_spool_strategies_stay_far_below_holding_every_update_in_memory(big_spool, strategy):
    length = 1 << 21
    all_updates = 20 * length * 4                     # 160 MiB if the 20 updates were stacked
    tracemalloc.start()
    try:
        out = strategy.aggregate(big_spool, np.zeros(length, np.float32))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.shape == (length,)
    # result (8 MiB) + Krum's float64 sum (16 MiB) + one 8 MiB block and its working copy
    assert peak < 48 << 20, f"peak {peak / 2**20:.1f} MiB"
    assert peak < all_updates / 3


# ---- the round engine -----------------------------------------------------------------------------

async def _three_updates(client, model: str, deltas, ids=("client-a", "client-b", "client-c")):
    for cid, delta in zip(ids, deltas):
        _, start, reply = await client.fit_round(cid, model, delta, 10)
        assert reply.accepted
    return start


async def test_a_median_round_commits_the_coordinate_median_of_its_updates(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=3, rounds=1, strategy="median")
    client = stub_client(coord.port)
    model = [await client.join(c) for c in ("client-a", "client-b", "client-c")][0].model_id
    start = await _three_updates(client, model, (1.0, 2.0, 500.0))
    assert (await asyncio.wait_for(coord.wait_done(), 60)).state is RoundState.DONE
    _, final = await client.download_vector("client-a", model, 2)
    np.testing.assert_allclose(final, start + 2.0, atol=1e-5)


async def test_a_clipping_round_bounds_each_clients_pull(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=3, rounds=1, strategy="clip:1.0")
    client = stub_client(coord.port)
    model = [await client.join(c) for c in ("client-a", "client-b", "client-c")][0].model_id
    start = await _three_updates(client, model, (0.0, 0.0, 500.0))
    assert (await asyncio.wait_for(coord.wait_done(), 60)).state is RoundState.DONE
    _, final = await client.download_vector("client-a", model, 2)
    delta = final.astype(np.float64) - start
    assert np.linalg.norm(delta) == pytest.approx(1.0 / 3, rel=1e-4)


@pytest.mark.slow
async def test_a_restarted_median_round_aggregates_the_replayed_and_new_updates(start_coordinator, stub_client,
                                                                                manual_clock):
    coord = await start_coordinator(min_clients=3, round_timeout_s=600, rounds=1, max_round_attempts=1,
                                    strategy="median")
    client = stub_client(coord.port)
    model = [await client.join(c) for c in ("client-a", "client-b", "client-c")][0].model_id
    await _three_updates(client, model, (-100.0,), ids=("client-a",))
    await pass_the_deadline(coord, manual_clock)
    assert (await asyncio.wait_for(coord.wait_done(), 60)).state is RoundState.FAILED
    await coord.stop()
    again = await start_coordinator(min_clients=3, round_timeout_s=10, rounds=1, max_round_attempts=1,
                                    strategy="median")
    client = stub_client(again.port)
    await _three_updates(client, model, (3.0, 4.0), ids=("client-b", "client-c"))
    assert (await asyncio.wait_for(again.wait_done(), 60)).state is RoundState.DONE
    _, start = await client.download_vector("client-b", model, 1)
    _, final = await client.download_vector("client-b", model, 2)
    np.testing.assert_allclose(final, start + 3.0, atol=1e-5)     # median of -100, 3, 4


# ---- command line ---------------------------------------------------------------------------------

def test_serve_and_simulate_refuse_a_bad_strategy_flag_with_the_accepted_specs(tmp_path, capsys, mlp_artifacts):
    from fedort.cli import main

    serve = ["coordinator", "serve", "--artifacts", str(mlp_artifacts), "--state-dir", str(tmp_path / "s"),
             "--strategy", "trimmed-mean:0.7"]
    assert main(serve) == 1
    assert "BETA (per side) must be in [0, 0.5), got '0.7'" in capsys.readouterr().err
    assert main(["simulate", "--strategy", "krum", "--out", str(tmp_path / "run")]) == 1
    assert "strategy 'krum' takes 1 parameter(s): expected 'krum:F'" in capsys.readouterr().err
