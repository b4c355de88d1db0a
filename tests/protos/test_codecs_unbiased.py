"""protos/update_codecs/int8.py: stochastic rounding is unbiased — the mean error over many draws goes to 0."""

from __future__ import annotations

import numpy as np

from fedort.protos.update_codecs import get_codec


def test_int8_mean_error_over_many_draws_is_within_the_statistical_bound():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(2048) * 0.1).astype(np.float32)
    codec = get_codec("int8")
    draws = 400
    errors = np.stack([codec.decode(codec.encode(x, rng), len(x)) - x.astype(np.float64) for _ in range(draws)])
    mean = errors.mean(axis=0)
    # each draw's error lies in (-s, s) with variance <= s^2 / 4, so the mean of n draws has std <= s / (2 sqrt n);
    # 6 standard deviations per coordinate (2048 coordinates: a false alarm has probability ~1e-6)
    scale = np.repeat(np.abs(x).reshape(-1, 256).max(axis=1) / 127, 256)
    assert (np.abs(mean) <= 6 * scale / (2 * np.sqrt(draws)) + 1e-9).all()
    # and the errors really are random, not a deterministic rounding (which would have zero spread)
    assert errors.std(axis=0).mean() > 0.1 * scale.mean()


def test_int8_is_deterministic_for_a_seeded_generator():
    x = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
    codec = get_codec("int8")
    assert codec.encode(x, np.random.default_rng(3)) == codec.encode(x, np.random.default_rng(3))
