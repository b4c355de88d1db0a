"""Sparsity warm-up for `topk:F` uploads: a larger fraction in a run's first rounds, decaying to F.

Why: with error feedback the device keeps what top-k did not send. In the first rounds the local
deltas are largest (digits task: |d| ~ 10 falling to ~4 by round 25), so at F = 0.01 the residual
soaks up most of them and releases them rounds later, against a global vector that has moved:
stale mass that stalls training (accuracy peaks around round 5, drops, and lags raw by 1-2 points
up to round 45). Deep Gradient Compression (Lin et al., ICLR 2018, "warm-up training") sends
more early and tightens the sparsity exponentially; this is that schedule, by the run's round:

    F_t = F * factor ** (1 - (t - 1) / rounds)   for rounds t = 1 .. rounds,   F_t = F after
    (rounded to 4 significant digits, capped at 1; factor 3, rounds 30 by default)

Bytes: sum_t F_t over the warm-up is F * rounds * (factor - 1) / ln(factor) (continuous
approximation) instead of F * rounds — with the default 3x30 about 1.8x the bytes of those
30 rounds, ~1.5x over a 45-round run (still >= 30x fewer than raw float32 at F = 0.01; the
measured figures are in benchmarks/README.md "Codecs"). The round is the coordinator's (the
task's), so a device that joins late or skips rounds uses the fraction of the round it trains
for. The device sends the spec it used (`topk:F_t`); a coordinator that allows only the exact
`topk:F` gets F (no warm-up), one that allows the family (`topk`) takes every F_t.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedort.protos.codecs import CodecSpec
from fedort.protos.errors import ConfigError

DEFAULT = "3x30"


@dataclass(frozen=True)
class TopkWarmup:
    """The schedule: start at `factor` x F and reach F after `rounds` rounds (`rounds` 0: off)."""

    factor: float = 3.0
    rounds: int = 30

    @classmethod
    def parse(cls, text: str | None) -> "TopkWarmup":
        """`FACTORxROUNDS` (e.g. `3x30`); `off`, `0` or '' disable it; ConfigError otherwise."""
        text = (text if text is not None else DEFAULT).strip().lower()
        if text in ("", "0", "off", "none"):
            return cls(1.0, 0)
        head, sep, tail = text.partition("x")
        try:
            factor, rounds = float(head), int(tail)
        except ValueError:
            factor = rounds = None
        if not sep or factor is None or not (1.0 <= factor <= 1000.0) or rounds < 0:
            raise ConfigError(f"topk_warmup must be FACTORxROUNDS with a factor in [1, 1000] and rounds >= 0 "
                              f"(e.g. {DEFAULT!r}) or 'off', got {text!r}")
        return cls(factor, rounds)

    @property
    def active(self) -> bool:
        return self.rounds > 0 and self.factor > 1.0

    def fraction(self, base: float, round: int) -> float:
        """F_t for round `round` (1-based, the coordinator's round) of a `topk:base` run."""
        if not self.active or round < 1 or round > self.rounds:
            return base
        f = base * self.factor ** (1.0 - (round - 1) / self.rounds)
        return min(1.0, max(base, float(f"{f:.4g}")))

    def spec(self, spec: CodecSpec, round: int | None) -> CodecSpec:
        """The spec to encode round `round` with: `spec` itself unless it is top-k inside the warm-up."""
        if spec.name != "topk" or round is None:
            return spec
        f = self.fraction(float(spec.param), int(round))
        return spec if f == spec.param else CodecSpec("topk", f, spec.zstd)


__all__ = ["DEFAULT", "TopkWarmup"]
