"""coordinator/fedavg.py: streaming FedAvg equals a numpy weighted mean, merges, and stays O(P)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from fedort.coordinator.aggregation.update import as_blocks
from fedort.coordinator.aggregation.weighted_sum import WeightedMean, WeightedSum
from fedort.common.errors import VectorError


@pytest.fixture
def updates() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.standard_normal((17, 100_003)).astype(np.float32), rng.integers(1, 500, 17).astype(np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mean_equals_numpy_weighted_average(updates, dtype):
    vectors, weights = updates
    s = WeightedSum(vectors.shape[1], np.dtype(dtype))
    for v, w in zip(vectors, weights):
        s.add(v, w)
    expected = np.average(vectors.astype(np.float64), axis=0, weights=weights)
    assert s.count == 17 and s.weight == weights.sum()
    np.testing.assert_allclose(s.mean(), expected, atol=1e-6)
    assert s.mean().dtype == np.float32


def test_float64_accumulation_does_not_depend_on_arrival_order(updates):
    vectors, weights = updates
    forward, backward = WeightedSum(vectors.shape[1], np.dtype(np.float64)), WeightedSum(vectors.shape[1], np.dtype(np.float64))
    for i in range(17):
        forward.add(vectors[i], weights[i])
        backward.add(vectors[16 - i], weights[16 - i])
    np.testing.assert_allclose(forward.mean(), backward.mean(), atol=1e-7, rtol=0)


def test_partial_sums_merge_into_the_sum_over_all_clients(updates):
    vectors, weights = updates
    left, right = WeightedSum(vectors.shape[1]), WeightedSum(vectors.shape[1])
    for i, (v, w) in enumerate(zip(vectors, weights)):
        (left if i % 2 else right).add(v, w)
    left.merge(right)
    np.testing.assert_allclose(left.mean(), np.average(vectors, axis=0, weights=weights), atol=1e-6)
    assert left.count == 17


def test_bad_inputs_are_vector_errors():
    s = WeightedSum(4)
    with pytest.raises(VectorError, match="4 elements"):
        s.add(np.zeros(5, np.float32), 1)
    with pytest.raises(VectorError, match="weight must be > 0"):
        s.add(np.zeros(4, np.float32), 0)
    with pytest.raises(VectorError, match="undefined"):
        s.mean()
    with pytest.raises(VectorError, match="cannot merge"):
        s.merge(WeightedSum(3))


@pytest.mark.slow
def test_folding_50_updates_of_5m_params_allocates_nothing_per_update():
    n = 5_000_000
    vector = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    s = WeightedSum(n, np.dtype(np.float64))
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        for i in range(50):
            s.add(vector, i + 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"folding allocated {peak} bytes; it must work in the preallocated accumulator"
    np.testing.assert_allclose(s.mean()[:100], vector[:100], atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_reset_sum_gives_the_bits_of_a_fresh_one(updates, dtype):
    """reset() zeroes lazily (the first fold writes 0 + w·v): same bits as a new sum, -0.0 included."""
    vectors, weights = updates
    vectors = vectors.copy()
    vectors[:, :3] = [-0.0, 0.0, -0.0]
    fresh, reused = WeightedSum(vectors.shape[1], np.dtype(dtype)), WeightedSum(vectors.shape[1], np.dtype(dtype))
    reused.add(np.full(vectors.shape[1], 7, np.float32), 3)   # an earlier round's sum
    reused.reset()
    for v, w in zip(vectors[:5], weights[:5]):
        fresh.add(v, w)
        reused.add(v, w)
    assert reused.count == 5 and reused.weight == fresh.weight
    assert fresh.total.tobytes() == reused.total.tobytes() and fresh.mean().tobytes() == reused.mean().tobytes()
    assert not np.signbit(reused.total[:3]).any()


def test_a_reset_sum_is_zero_for_a_merge_or_a_refused_first_update(updates):
    vectors, weights = updates
    n = vectors.shape[1]
    s = WeightedSum(n, np.dtype(np.float64))
    s.add(vectors[0], weights[0])
    s.reset()
    with pytest.raises(VectorError, match="elements"):   # covers only part of the vector: nothing kept
        s.add_blocks([(0, vectors[1][: n // 2])], 5)
    other = WeightedSum(n, np.dtype(np.float64))
    other.add(vectors[2], weights[2])
    s.merge(other)
    assert s.total.tobytes() == other.total.tobytes()


def _fedavg_round(mean: WeightedMean, vectors: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """One round of the coordinator's FedAvg combiner: reset, fold every update, combine."""
    mean.reset(vectors.shape[1])
    for v, w in zip(vectors, weights):
        mean.fold(as_blocks(v), w)
    return mean.combine([], np.zeros(vectors.shape[1], np.float32))


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_a_round_s_mean_that_is_still_held_never_changes_when_later_rounds_combine(updates):
    vectors, weights = updates
    mean = WeightedMean()
    first = _fedavg_round(mean, vectors, weights)          # e.g. the global vector an export still holds
    kept = first.copy()
    later = [_fedavg_round(mean, vectors * k, weights) for k in (2, 3, 4, 5, 6)]   # more rounds than it recycles
    np.testing.assert_array_equal(first, kept)
    assert not any(np.shares_memory(first, x) for x in later)


def test_a_released_mean_s_memory_is_reused_by_a_later_round_with_the_same_bits(updates):
    vectors, weights = updates
    mean = WeightedMean()
    first = _fedavg_round(mean, vectors, weights)
    where, expected = _address(first), WeightedSum(vectors.shape[1], np.dtype(np.float64))
    del first
    elsewhere = np.ones_like(vectors[0])                   # an allocator would hand this one the freed memory
    for v, w in zip(vectors * 2, weights):
        expected.add(v, w)
    second = _fedavg_round(mean, vectors * 2, weights)
    assert _address(second) == where != _address(elsewhere)
    assert second.tobytes() == expected.mean().tobytes()   # same bits as a fresh array's mean
