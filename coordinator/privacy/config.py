"""The privacy section (`[coordinator.privacy]`, also a simulation's): secure aggregation and DP-FedAvg.

`PrivacySettings` checks its own fields; `privacy_conflicts` checks them against the rest of a
config (the strategy, the cohort size). Applied by `coordinator.privacy.round_privacy`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from fedort.common.errors import ConfigError
from fedort.common.settings.options import option

# strategies that need individual updates in the clear; refused with secagg
ROBUST_PREFIXES = ("median", "trimmed-mean", "krum", "multi-krum")


@dataclass(frozen=True)
class PrivacySettings:
    """Secure aggregation (the coordinator only sees the masked sum) and user-level DP with accounting."""

    secagg: bool = option(False, "secure aggregation (SecAgg+): the coordinator only ever sees the masked sum")
    secagg_threshold: int | None = option(
        None,
        "shares needed to recover a client's secrets (T)",
        metavar="T",
        doc_default="a majority of the neighbours",
    )
    secagg_neighbours: int | None = option(
        None,
        "SecAgg+ graph degree K; K >= cohort - 1 is classic SecAgg",
        metavar="K",
        doc_default="cohort - 1 up to 17 clients, else max(16, 2*ceil(log2 n) + 4)",
    )
    secagg_clip: float = option(1.0, "fixed point: each value of a client's delta clipped to [-C, C]", metavar="C")
    secagg_scale: float = option(65536.0, "fixed point: values times S, rounded, in Z_{2^b}", metavar="S")
    dp_noise_multiplier: float = option(
        0.0, "user-level DP: Gaussian noise of std Z*C on the sum of clipped deltas (0: off)", metavar="Z"
    )
    dp_clip: str | None = option(
        None,
        "L2 clip norm C of each client's delta, or adaptive toward quantile Q (Q defaults to 0.5)",
        metavar="C|adaptive[:Q]",
        doc_default="off",
    )
    dp_delta: float = option(1e-5, "delta of the reported (epsilon, delta)", metavar="D")
    dp_target_epsilon: float | None = option(None, "stop before the round that would exceed this epsilon", metavar="E")

    def __post_init__(self) -> None:
        if self.dp_clip is not None and not isinstance(self.dp_clip, str):
            object.__setattr__(self, "dp_clip", str(self.dp_clip))
        problems = _own_problems(self)
        if problems:
            raise ConfigError("; ".join(problems))

    @property
    def private(self) -> bool:
        """Whether a round runs secure aggregation or DP."""
        return self.secagg or self.dp_noise_multiplier > 0 or self.dp_clip is not None

    @property
    def central_dp(self) -> bool:
        """DP on the coordinator's side (clip and noise there): DP without secure aggregation."""
        return not self.secagg and (self.dp_noise_multiplier > 0 or self.dp_clip is not None)


PRIVACY_KEYS = tuple(f.name for f in fields(PrivacySettings))


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


def _own_problems(p: PrivacySettings) -> list[str]:
    out: list[str] = []
    if not isinstance(p.secagg, bool):
        out.append(f"secagg must be true or false, got {p.secagg!r}")
    for name, low in (("secagg_threshold", 2), ("secagg_neighbours", 1)):
        v = getattr(p, name)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v >= low):
            out.append(f"{name} must be an integer >= {low}, got {v!r}")
    for name in ("secagg_clip", "secagg_scale"):
        v = getattr(p, name)
        if not (_num(v) and v > 0):
            out.append(f"{name} must be a finite number > 0, got {v!r}")
    if p.secagg and str(p.dp_clip or "").startswith("adaptive"):
        out.append(
            "adaptive clipping needs each client's clipped/not-clipped bit in the clear; with secagg use a "
            "fixed --dp-clip C"
        )
    z = p.dp_noise_multiplier
    if not (_num(z) and z >= 0):
        out.append(f"dp_noise_multiplier must be a finite number >= 0, got {z!r}")
    if p.dp_clip is not None:
        try:
            parse_dp_clip(p.dp_clip)
        except ConfigError as e:
            out.append(str(e))
    elif z:
        out.append("dp_noise_multiplier needs dp_clip (the sensitivity the noise is calibrated to)")
    d = p.dp_delta
    if not (_num(d) and 0 < d < 1):
        out.append(f"dp_delta must be in (0, 1), got {d!r}")
    eps = p.dp_target_epsilon
    if eps is not None and not (_num(eps) and eps > 0):
        out.append(f"dp_target_epsilon must be > 0, got {eps!r}")
    if eps is not None and not z:
        out.append("dp_target_epsilon needs dp_noise_multiplier > 0 (without noise epsilon is infinite)")
    return out


def privacy_conflicts(p: PrivacySettings, strategy: str, min_clients: int | None = None) -> list[str]:
    """What in the rest of a config the privacy settings `p` cannot work with, as messages."""
    out: list[str] = []
    family = str(strategy).split(":")[0]
    if p.secagg:
        if family in ROBUST_PREFIXES:
            out.append(
                f"strategy {strategy!r} needs every update in the clear; secure aggregation only reveals "
                "the sum (use fedavg with --secagg; clip on the devices with --dp-clip C)"
            )
        elif family != "fedavg":
            out.append(
                f"strategy {strategy!r} clips on the coordinator, which never sees an update under secure "
                "aggregation; clip on the devices instead with --dp-clip C (--dp-noise-multiplier 0 for "
                "clipping without noise) and strategy fedavg"
            )
        if isinstance(min_clients, int) and min_clients < 2:
            out.append(
                f"secure aggregation needs a cohort of >= 2 clients: min_clients must be >= 2 with --secagg, "
                f"got {min_clients}"
            )
    if p.dp_clip is not None and family != "fedavg":
        out.append(
            f"dp_clip replaces the strategy by DP-FedAvg (clip each delta, noise on the sum); "
            f"strategy {strategy!r} cannot be combined with it (use fedavg)"
        )
    return out
