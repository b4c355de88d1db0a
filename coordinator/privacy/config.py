"""Parsing and checks of the privacy settings shared by `coordinator serve` and `simulate`.

| key | default | meaning |
| --- | --- | --- |
| secagg | false | secure aggregation (SecAgg+): the coordinator only ever sees the masked sum |
| secagg_threshold | majority of neighbours | shares needed to recover a client's secrets (T) |
| secagg_neighbours | cohort - 1 up to 17, else max(16, 2*ceil(log2 n) + 4) | SecAgg+ graph degree K |
| secagg_clip / secagg_scale | 1.0 / 2^16 | fixed point: values clipped to [-clip, clip], scaled, in Z_{2^b} |
| dp_noise_multiplier | 0 (off) | z: Gaussian noise std z*C on the sum of clipped deltas |
| dp_clip | none | `C` (fixed L2 norm) or `adaptive[:QUANTILE]` (default quantile 0.5) |
| dp_delta | 1e-5 | delta of the reported (epsilon, delta) |
| dp_target_epsilon | none | stop before the round that would exceed this epsilon |
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from fedort.common.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class PrivacySettings:
    """The privacy fields (the table above), declared once: `CoordinatorConfig` and `SimulationConfig`
    inherit them, so both take the same keys with the same defaults; `privacy_problems` checks them."""

    secagg: bool = False
    secagg_threshold: int | None = None
    secagg_neighbours: int | None = None
    secagg_clip: float = 1.0
    secagg_scale: float = 65536.0
    dp_noise_multiplier: float = 0.0
    dp_clip: str | None = None
    dp_delta: float = 1e-5
    dp_target_epsilon: float | None = None


PRIVACY_KEYS = tuple(f.name for f in fields(PrivacySettings))

# strategies that need individual updates in the clear; refused with --secagg
ROBUST_PREFIXES = ("median", "trimmed-mean", "krum", "multi-krum")


@dataclass(frozen=True)
class DpClip:
    """A fixed clip norm, or adaptive clipping toward a quantile."""

    norm: float | None = None
    adaptive_quantile: float | None = None

    @property
    def adaptive(self) -> bool:
        return self.adaptive_quantile is not None


def parse_dp_clip(spec: str | float) -> DpClip:
    """`C` (a float > 0) | `adaptive` | `adaptive:Q` with Q in (0, 1)."""
    text = str(spec).strip()
    if text.startswith("adaptive"):
        rest = text[len("adaptive") :]
        if rest == "":
            return DpClip(adaptive_quantile=0.5)
        if rest.startswith(":"):
            try:
                q = float(rest[1:])
            except ValueError:
                q = math.nan
            if 0 < q < 1:
                return DpClip(adaptive_quantile=q)
    else:
        try:
            c = float(text)
        except ValueError:
            c = math.nan
        if c > 0 and math.isfinite(c):
            return DpClip(norm=c)
    raise ConfigError(f"dp_clip must be a norm C > 0, 'adaptive' or 'adaptive:Q' with Q in (0, 1), got {spec!r}")


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def privacy_problems(values: dict[str, Any], strategy: str) -> list[str]:
    """Every problem with the privacy settings in `values` (field name -> value), as messages."""
    out: list[str] = []
    g = values.get
    if g("secagg"):
        if str(strategy).split(":")[0] in ROBUST_PREFIXES:
            out.append(
                f"strategy {strategy!r} needs every update in the clear; secure aggregation only reveals "
                "the sum (use fedavg with --secagg; clip on the devices with --dp-clip C)"
            )
        elif str(strategy).split(":")[0] != "fedavg":
            out.append(
                f"strategy {strategy!r} clips on the coordinator, which never sees an update under secure "
                "aggregation; clip on the devices instead with --dp-clip C (--dp-noise-multiplier 0 for "
                "clipping without noise) and strategy fedavg"
            )
        min_clients = g("min_clients")
        if isinstance(min_clients, int) and min_clients < 2:
            out.append(
                f"secure aggregation needs a cohort of >= 2 clients: min_clients must be >= 2 with --secagg, "
                f"got {min_clients}"
            )
    for name, low in (("secagg_threshold", 2), ("secagg_neighbours", 1)):
        v = g(name)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v >= low):
            out.append(f"{name} must be an integer >= {low}, got {v!r}")
    for name in ("secagg_clip", "secagg_scale"):
        v = g(name)
        if v is not None and not (_num(v) and v > 0):
            out.append(f"{name} must be a finite number > 0, got {v!r}")
    if g("dp_clip") is not None and str(strategy).split(":")[0] != "fedavg":
        out.append(
            f"dp_clip replaces the strategy by DP-FedAvg (clip each delta, noise on the sum); "
            f"strategy {strategy!r} cannot be combined with it (use fedavg)"
        )
    if g("secagg") and str(g("dp_clip") or "").startswith("adaptive"):
        out.append(
            "adaptive clipping needs each client's clipped/not-clipped bit in the clear; with secagg use a "
            "fixed --dp-clip C"
        )
    z = g("dp_noise_multiplier")
    if z is not None and not (_num(z) and z >= 0):
        out.append(f"dp_noise_multiplier must be a finite number >= 0, got {z!r}")
    if (clip := g("dp_clip")) is not None:
        try:
            parse_dp_clip(clip)
        except ConfigError as e:
            out.append(str(e))
    elif z:
        out.append("dp_noise_multiplier needs dp_clip (the sensitivity the noise is calibrated to)")
    d = g("dp_delta")
    if d is not None and not (_num(d) and 0 < d < 1):
        out.append(f"dp_delta must be in (0, 1), got {d!r}")
    eps = g("dp_target_epsilon")
    if eps is not None and not (_num(eps) and eps > 0):
        out.append(f"dp_target_epsilon must be > 0, got {eps!r}")
    if eps is not None and not z:
        out.append("dp_target_epsilon needs dp_noise_multiplier > 0 (without noise epsilon is infinite)")
    return out
