"""Staleness weights for asynchronous aggregation: how much an update trained s versions ago counts.

    weight = parse_staleness_weight("poly:0.5")      # weight(s) = (1 + s) ** -0.5
    weight(3)                                         # 0.5

| spec | w(s) | source |
| --- | --- | --- |
| `constant` | 1 | FedBuff without staleness scaling |
| `poly:A` | (1 + s)^(−A), A ≥ 0 | FedBuff (Nguyen et al., AISTATS 2022) uses A = 0.5; FedAsync's polynomial |
| `hinge:A,B` | 1 if s ≤ B, else 1 / (A·(s − B) + 1); A > 0, B ≥ 0 | FedAsync (Xie et al., 2019) |

Every weight is in (0, 1], equals 1 at s = 0 and never grows with s.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedort.common.errors import ConfigError
from fedort.common.settings.specs import spec_number, split_spec

SPECS = "constant | poly:A | hinge:A,B"


@dataclass(frozen=True)
class StalenessWeight:
    """w(s) for staleness s >= 0 (integers: versions behind the current global)."""

    kind: str
    a: float = 0.0
    b: float = 0.0

    def __call__(self, staleness: int) -> float:
        if staleness < 0:
            raise ValueError(f"staleness must be >= 0, got {staleness}")
        if self.kind == "constant":
            return 1.0
        if self.kind == "poly":
            return (1.0 + staleness) ** -self.a
        return 1.0 if staleness <= self.b else 1.0 / (self.a * (staleness - self.b) + 1.0)

    def __str__(self) -> str:
        if self.kind == "constant":
            return "constant"
        if self.kind == "poly":
            return f"poly:{self.a!r}"
        return f"hinge:{self.a!r},{self.b!r}"


def parse_staleness_weight(spec: str) -> StalenessWeight:
    """The weight function a spec names (table above); ConfigError says what was expected."""
    name, args = split_spec(spec, "staleness weight", SPECS, {"constant": 0, "poly": 1, "hinge": 2}, sep=",")
    values = [spec_number(x, what, str(spec), "staleness weight") for x, what in zip(args, ("A", "B"))]
    if name == "poly" and values[0] < 0:
        raise ConfigError(f"staleness weight {spec!r}: A must be >= 0, got {values[0]!r}")
    if name == "hinge":
        if values[0] <= 0:
            raise ConfigError(f"staleness weight {spec!r}: A must be > 0, got {values[0]!r}")
        if values[1] < 0:
            raise ConfigError(f"staleness weight {spec!r}: B must be >= 0, got {values[1]!r}")
    return StalenessWeight(name, *values)
