"""FedBuff's buffer: staleness-weighted folding against a numpy reference, the K-update signal,
refusal of stale and future updates, and its state hooks."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from fedort.coordinator.fedbuff.buffer import UpdateBuffer
from fedort.coordinator.aggregation.server_optimizers import parse_server_optimizer
from fedort.coordinator.fedbuff.staleness import parse_staleness_weight
from fedort.common.errors import ProtocolError, StaleRoundError, TooStaleError
from fedort.protos.status_codes import status_for

P = 5000


def buffer(k=3, s=4, weight="poly:0.5", version=10, length=P) -> UpdateBuffer:
    return UpdateBuffer(length, k, s, parse_staleness_weight(weight), version=version)


def test_a_full_buffer_yields_the_staleness_weighted_example_mean_of_the_deltas():
    rng = np.random.default_rng(0)
    buf = buffer(k=3, s=4)
    items = [(rng.normal(size=P).astype(np.float32), n, b) for n, b in ((10, 10), (30, 8), (5, 6))]
    for delta, n, b in items:
        buf.add(delta, n, b)
    got = buf.take()
    want = sum((1 + 10 - b) ** -0.5 * n * d.astype(np.float64) for d, n, b in items) / 45
    np.testing.assert_allclose(got.delta, want, rtol=1e-5, atol=1e-7)
    assert (got.updates, got.examples, got.version) == (3, 45, 10)
    assert got.staleness == {0: 1, 2: 1, 4: 1}


def test_ready_signals_every_k_updates_and_take_starts_the_next_version():
    buf = buffer(k=2)
    one = np.ones(P, np.float32)
    assert buf.add(one, 1, 10) is False
    assert buf.add(one, 1, 10) is True and buf.ready
    first = buf.take()
    assert buf.version == 11 and buf.count == 0 and not buf.ready
    assert buf.add(one * 3, 1, 11) is False
    assert buf.add(one * 3, 1, 11) is True
    second = buf.take()
    assert np.all(first.delta == 1) and np.all(second.delta == 3) and second.version == 11


def test_an_update_staler_than_the_limit_is_refused_failed_precondition_and_not_folded():
    buf = buffer(k=2, s=4, version=10)
    buf.add(np.ones(P, np.float32), 1, 6)                      # staleness 4: the limit, accepted
    with pytest.raises(TooStaleError) as err:
        buf.add(np.full(P, 100, np.float32), 1, 5)           # staleness 5
    assert isinstance(err.value, StaleRoundError)
    assert status_for(err.value) == (grpc.StatusCode.FAILED_PRECONDITION, str(err.value))
    assert "version 5 is 5 versions behind the current version 10; at most 4 accepted" in str(err.value)
    assert buf.count == 1 and buf.refused == 1
    buf.add(np.ones(P, np.float32), 1, 10)
    np.testing.assert_allclose(buf.take().delta, (1 + 5 ** -0.5) / 2, rtol=1e-6)


def test_an_update_from_a_future_version_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="version 11, expected a version in 0..10"):
        buffer(version=10).add(np.ones(P, np.float32), 1, 11)


def test_a_trained_model_and_its_base_give_the_same_fold_as_the_delta():
    rng = np.random.default_rng(1)
    base = rng.normal(size=P).astype(np.float32)
    model = (base + rng.normal(0, 0.1, P)).astype(np.float32)
    a, b = buffer(k=1), buffer(k=1)
    a.add(model, 7, 9, base_vector=base)
    b.add(model - base, 7, 9)
    assert np.array_equal(a.take().delta, b.take().delta)


def test_the_combined_vector_through_fedavg_is_the_global_plus_the_mean_delta():
    buf = buffer(k=1, weight="constant")
    delta = np.linspace(-1, 1, P, dtype=np.float32)
    buf.add(delta, 4, 10)
    agg = buf.take()
    x = np.full(P, 2, np.float32)
    out = parse_server_optimizer("fedavg").apply(x, agg.combined(x))
    np.testing.assert_allclose(out, x + delta, rtol=1e-7)


def test_state_and_load_state_continue_a_buffer_identically():
    rng = np.random.default_rng(2)
    deltas = [rng.normal(size=P).astype(np.float32) for _ in range(3)]
    straight = buffer(k=3)
    for d in deltas:
        straight.add(d, 2, 9)
    first = buffer(k=3)
    first.add(deltas[0], 2, 9)
    resumed = buffer(k=3, version=0)
    resumed.load_state(first.state())
    for d in deltas[1:]:
        resumed.add(d, 2, 9)
    assert resumed.version == 10 and resumed.histogram == straight.histogram
    assert np.array_equal(resumed.take().delta, straight.take().delta)


def test_taking_an_empty_buffer_is_an_error():
    with pytest.raises(Exception, match="buffer is empty"):
        buffer().take()
