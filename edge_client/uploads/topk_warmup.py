"""Sparsity warm-up for `topk:F` uploads: a larger fraction in a run's first rounds, decaying to F.

Why: with error feedback the device keeps what top-k did not send. With a dense local update (the
digits task's AdamW deltas: |d| ~ 10 per client in round 1, ~4 by round 25) and F = 0.01, the
residual soaks up most of every delta and releases it rounds later against a global vector that
has moved: in round 15 the applied update is ~5 where raw FedAvg applies ~3.5, at cosine ~0.3
with it. Accuracy peaks near round 5, drops by 10-25 points, and lags raw by 1-2 points at
round 45. Deep Gradient Compression (Lin et al., ICLR 2018, "warm-up training") sends more early
and tightens the sparsity exponentially; this is that schedule, by the run's round t:

    F_t = F * factor ** (1 - (t - 1) / rounds)   for t = 1 .. rounds,   F_t = F after
    (rounded to 4 significant digits, capped at 1; default factor 3 over 45 rounds: `3x45`)

Bytes: over the warm-up sum_t F_t ~ F * rounds * (factor - 1) / ln(factor), i.e. 1.82x the
bytes of F alone for `3x45` (benchmarks/README.md, "Codecs", has the bytes per codec).
The round is the coordinator's (the task's), so a device that joins late or skips rounds uses
the fraction of the round it trains for. The device sends the spec it used (`topk:F_t`); a
coordinator that allows only the exact `topk:F` gets F (no warm-up), one that allows the family
(`topk`, the default when no list is configured) takes every F_t.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedort.common.errors import ConfigError
from fedort.common.invariants import present
from fedort.protos.update_codecs import CodecSpec

DEFAULT = "3x45"


@dataclass(frozen=True)
class TopkWarmup:
    """The schedule: start at `factor` x F and reach F after `rounds` rounds (`rounds` 0: off)."""

    factor: float = 3.0
    rounds: int = 30

    @classmethod
    def parse(cls, text: str | int | None) -> TopkWarmup:
        """`FACTORxROUNDS` (e.g. `3x45`); `off`, `0` or '' disable it; ConfigError otherwise."""
        text = str(text if text is not None else DEFAULT).strip().lower()  # TOML may give a number
        if text in ("", "0", "off", "none"):
            return cls(1.0, 0)
        head, sep, tail = text.partition("x")
        factor: float | None
        rounds: int | None
        try:
            factor, rounds = float(head), int(tail)
        except ValueError:
            factor = rounds = None
        if not sep or factor is None or rounds is None or not (1.0 <= factor <= 1000.0) or rounds < 0:
            raise ConfigError(
                f"topk_warmup must be FACTORxROUNDS with a factor in [1, 1000] and rounds >= 0 "
                f"(e.g. {DEFAULT!r}) or 'off', got {text!r}"
            )
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
        f = self.fraction(float(present(spec.param, "the top-k fraction")), int(round))
        return spec if f == spec.param else CodecSpec("topk", f, spec.zstd)


__all__ = ["DEFAULT", "TopkWarmup"]
