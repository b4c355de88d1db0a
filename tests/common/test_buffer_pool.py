"""Recycled parameter buffers (fedort.common.buffer_pool, TrainingSession.recycle_buffers) and the blockwise
finite check (edge_client.guards.all_finite): memory is reused only when nothing holds it, the pool stays
bounded, and non-finite values are found wherever they are."""

from __future__ import annotations

import numpy as np
import pytest

from fedort.edge_client.training import local_round
from fedort.common.buffer_pool import BufferPool
from fedort.common.client_data import ClientData
from fedort.edge_client.training.guards import BLOCK, all_finite
from fedort.ort.session import TrainingSession
from fedort.common.errors import TrainingError
from fedort.protos.messages import TrainConfig


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@pytest.fixture
def session(mlp_artifacts) -> TrainingSession:
    s = TrainingSession.from_artifacts(mlp_artifacts)
    s.recycle_buffers(3)
    return s


def test_a_vector_the_caller_still_holds_is_never_overwritten(session):
    first = session.to_buffer()
    kept = first.copy()
    session.from_buffer(np.full(len(first), 2.5, np.float32))
    second = session.to_buffer()
    np.testing.assert_array_equal(first, kept)            # unchanged by the later to_buffer
    assert not np.shares_memory(first, second) and np.all(second == 2.5)


def test_a_released_vector_s_memory_is_reused(session):
    first = session.to_buffer()
    where = _address(first)
    del first
    session.from_buffer(np.full(session.parameter_count(), -1.0, np.float32))
    second = session.to_buffer()
    assert _address(second) == where and np.all(second == -1.0) and second.flags.writeable


@pytest.mark.parametrize("hold", [lambda a: a[10:20], memoryview, lambda a: [a]], ids=["view", "memoryview", "list"])
def test_a_view_or_any_other_reference_keeps_the_memory_busy(session, hold):
    first = session.to_buffer()
    where, kept = _address(first), first.copy()
    held = hold(first)
    del first
    for value in (0.0, 1.0, 2.0, 3.0):                       # more to_buffer calls than the pool keeps
        session.from_buffer(np.full(session.parameter_count(), value, np.float32))
        assert _address(session.to_buffer()) != where
    whole = held[0] if isinstance(held, list) else np.asarray(held)
    np.testing.assert_array_equal(whole, kept[10:20] if len(whole) == 10 else kept)


def test_the_pool_keeps_at_most_keep_buffers_and_hands_out_fresh_ones_beyond():
    pool = BufferPool(3)
    held = [pool.take(1000) for _ in range(10)]            # all alive at once: ten distinct arrays
    assert len({_address(a) for a in held}) == 10 and len(pool) == 3
    del held
    again = [pool.take(1000) for _ in range(3)]
    assert len(pool) == 3 and len({_address(a) for a in again}) == 3


def test_a_buffer_of_another_length_makes_room_when_the_pool_is_full():
    pool = BufferPool(1)
    pool.take(1000)                                          # released at once
    b = pool.take(500)
    assert len(pool) == 1 and len(b) == 500 and _address(pool.take(500)) != _address(b)


def test_recycle_buffers_zero_turns_recycling_off(mlp_artifacts):
    s = TrainingSession.from_artifacts(mlp_artifacts)
    s.recycle_buffers(2)
    s.recycle_buffers(0)
    first = s.to_buffer()
    first.fill(9.0)                                          # the caller's own array, as without a pool
    assert not np.any(s.to_buffer() == 9.0)


@pytest.mark.parametrize("where", [0, BLOCK - 1, BLOCK, 3 * BLOCK + 7, -1])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_all_finite_finds_a_non_finite_value_anywhere(where, bad):
    v = np.ones(3 * BLOCK + 100, np.float32)
    assert all_finite(v)
    v[where] = bad
    assert not all_finite(v)


def test_all_finite_of_an_empty_or_shaped_array():
    assert all_finite(np.zeros(0, np.float32))
    m = np.ones((3, 4), np.float32)
    m[2, 3] = np.nan
    assert not all_finite(m)


def test_a_training_that_ends_in_nan_is_not_returned(session, batch):
    x, y = batch
    data = ClientData.from_arrays({"x": x, "labels": y})
    # finite (from_buffer refuses NaN), but so large that the first forward pass overflows to NaN
    start = np.full(session.parameter_count(), 3e38, np.float32)
    with pytest.raises(TrainingError, match="NaN or infinite parameters"):
        local_round.fit(session, start, data, session.manifest.inputs,
                        TrainConfig(local_epochs=1, batch_size=8, learning_rate=0.1, seed=1))
