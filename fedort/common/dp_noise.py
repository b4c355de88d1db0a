"""Clipping and Gaussian noise, the two DP operations both sides apply.

`clip_to_norm` scales a delta down to L2 norm <= C (and says whether it was already within C,
the bit adaptive clipping counts); `gaussian` draws the noise. The device uses them for local DP
and for its share of distributed DP under secure aggregation; the coordinator for central DP.

Known limit: noise comes from numpy's PCG64 seeded from OS entropy, in float64 — not a CSPRNG and
not hardened against floating-point attacks on the Gaussian mechanism (Mironov, CCS 2012).
"""

from __future__ import annotations

import math

import numpy as np

from fedort.common.errors import ConfigError, VectorError


def clip_to_norm(delta: np.ndarray, clip: float) -> tuple[np.ndarray, bool]:
    """(delta * min(1, C / ||delta||_2) as float64, ||delta||_2 <= C)."""
    if not (clip > 0 and math.isfinite(clip)):
        raise ConfigError(f"clip norm must be finite and > 0, got {clip}")
    vec = np.asarray(delta, dtype=np.float64)
    norm = float(np.linalg.norm(vec))
    if not math.isfinite(norm):
        raise VectorError("cannot clip a delta holding NaN or infinity")
    if norm <= clip:
        return vec.copy(), True
    return vec * (clip / norm), False


def gaussian(length: int, std: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """`length` independent N(0, std^2) draws (float64); a fresh OS-seeded generator by default."""
    if not (std >= 0 and math.isfinite(std)):
        raise ConfigError(f"noise std must be finite and >= 0, got {std}")
    rng = rng if rng is not None else np.random.default_rng()
    return rng.normal(0.0, std, size=length) if std > 0 else np.zeros(length)


def distributed_noise_std(noise_multiplier: float, clip: float, expected_clients: int) -> float:
    """Per-client std z*C/sqrt(n): n clients' independent noise sums to the central N(0, (zC)^2).

    If only m < n of them contribute (dropouts), the sum's std is z*C*sqrt(m/n): less privacy
    than configured, which the accountant must be told (see README "Privacy").
    """
    if expected_clients < 1:
        raise ConfigError(f"expected clients must be >= 1, got {expected_clients}")
    return noise_multiplier * clip / math.sqrt(expected_clients)
