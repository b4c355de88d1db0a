"""protos/codecs: every codec decodes within the error bound its docstring states."""

from __future__ import annotations

import numpy as np
import pytest

from fedort.protos.update_codecs import get_codec
from fedort.protos.update_codecs.topk import topk_count

P = 100_003  # not a multiple of any block size


@pytest.fixture
def delta() -> np.ndarray:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(P).astype(np.float32) * np.float32(0.01)
    x[::97] *= 1000   # some large values, so per-block scales differ
    x[5:300] = 0.0    # an all-zero block
    x[400] = np.float32(3e-9)  # an fp16 subnormal
    return x


def decoded(spec: str, x: np.ndarray, seed: int = 0) -> tuple[np.ndarray, bytes]:
    codec = get_codec(spec)
    payload = codec.encode(x, np.random.default_rng(seed))
    return codec.decode(payload, len(x)), payload


@pytest.mark.parametrize("spec", ["raw", "zstd+raw"])
def test_raw_is_bit_exact(spec, delta):
    y, payload = decoded(spec, delta)
    np.testing.assert_array_equal(y, delta)


@pytest.mark.parametrize("spec", ["fp16", "zstd+fp16"])
def test_fp16_relative_error_at_most_2_to_minus_11(spec, delta):
    y, payload = decoded(spec, delta)
    x = delta.astype(np.float64)
    assert (np.abs(y - x) <= np.maximum(2.0 ** -11 * np.abs(x), 2.0 ** -25)).all()
    if spec == "fp16":
        assert len(payload) == 2 * P


@pytest.mark.parametrize("spec", ["bf16", "zstd+bf16"])
def test_bf16_relative_error_at_most_2_to_minus_8(spec, delta):
    y, payload = decoded(spec, delta)
    x = delta.astype(np.float64)
    assert (np.abs(y - x) <= np.maximum(2.0 ** -8 * np.abs(x), 2.0 ** -134)).all()


def test_bf16_rounds_to_nearest_even():
    # 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1.0);
    # 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go to 1 + 2^-6 (even mantissa).
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20], dtype=np.float32)
    y, _ = decoded("bf16", x)
    assert y.tolist() == [1.0, 1 + 2 ** -6, 1 + 2 ** -7]


@pytest.mark.parametrize("spec,block", [("int8", 256), ("int8:1024", 1024), ("zstd+int8", 256)])
def test_int8_error_below_the_block_scale(spec, block, delta):
    y, payload = decoded(spec, delta)
    x = delta.astype(np.float64)
    n_blocks = -(-P // block)
    padded = np.zeros(n_blocks * block)
    padded[:P] = np.abs(x)
    scale = np.repeat(padded.reshape(n_blocks, block).max(axis=1) / 127, block)[:P]
    assert (np.abs(y - x) <= scale * (1 + 2.0 ** -22)).all()
    if not spec.startswith("zstd"):
        assert len(payload) == P + 4 * n_blocks


def test_int8_all_zero_block_decodes_to_zero():
    x = np.zeros(600, dtype=np.float32)
    x[512:] = 1.0
    y, _ = decoded("int8", x)
    assert (y[:512] == 0).all() and np.allclose(y[512:], 1.0, rtol=1e-6, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["topk:0.01", "topk:0.1", "zstd+topk:0.01"])
def test_topk_exact_on_the_kept_coordinates_and_zero_elsewhere(spec, delta):
    y, payload = decoded(spec, delta)
    fraction = float(spec.rpartition(":")[2])
    k = topk_count(P, fraction)
    kept = np.flatnonzero(y)
    np.testing.assert_array_equal(y[kept], delta[kept])
    # the kept ones are the k largest magnitudes: nothing dropped is larger than anything kept
    dropped = np.setdiff1d(np.arange(P), kept)
    assert len(kept) <= k and np.abs(delta[dropped]).max() <= np.abs(delta[kept]).min()
    assert np.sum((delta.astype(np.float64) - y) ** 2) <= (1 - k / P) * np.sum(delta.astype(np.float64) ** 2)
    if not spec.startswith("zstd"):
        assert len(payload) == 8 * k


def test_topk_keeps_at_least_one_value():
    x = np.array([0.0, -5.0, 1.0], dtype=np.float32)
    y, payload = decoded("topk:0.0001", x)
    assert y.tolist() == [0.0, -5.0, 0.0] and len(payload) == 8


def test_topk_fraction_one_is_lossless(delta):
    y, _ = decoded("topk:1.0", delta)
    np.testing.assert_array_equal(y, delta)


def test_zstd_shrinks_int8_and_topk_payloads(delta):
    for spec in ("int8", "topk:0.01"):
        assert len(decoded("zstd+" + spec, delta)[1]) < len(decoded(spec, delta)[1])
