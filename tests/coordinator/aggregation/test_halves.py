"""`aggregation.halves.in_halves`: elementwise work split over two threads gives one pass's bits, covers
every element once, and raises what either half raised."""

import numpy as np
import pytest

from fedort.coordinator.aggregation.halves import MIN_SPLIT, in_halves
from fedort.coordinator.aggregation.weighted_sum import WeightedSum


def test_a_large_weighted_mean_split_over_two_threads_has_the_bits_of_one_pass():
    n = MIN_SPLIT + 37
    rng = np.random.default_rng(7)
    s = WeightedSum(n, np.dtype(np.float64))
    for w in (3.0, 5.0, 11.0):
        s.add(rng.standard_normal(n).astype(np.float32), w)
    expected = np.divide(s.total, np.float64(s.weight), dtype=np.float64).astype(np.float32)
    assert s.mean().tobytes() == expected.tobytes()


@pytest.mark.parametrize("n", [0, 5, MIN_SPLIT - 1, MIN_SPLIT, 2 * MIN_SPLIT + 3])
def test_every_element_is_covered_exactly_once(n):
    hits = np.zeros(n, dtype=np.int64)

    def mark(lo, hi):
        np.add(hits[lo:hi], 1, out=hits[lo:hi])

    in_halves(mark, n)
    assert (hits == 1).all()


def test_an_error_in_the_helper_thread_is_raised_in_the_caller():
    def upper_fails(lo, hi):
        if lo > 0:
            raise ValueError(f"half [{lo}, {hi}) failed")

    with pytest.raises(ValueError, match="failed"):
        in_halves(upper_fails, MIN_SPLIT)
