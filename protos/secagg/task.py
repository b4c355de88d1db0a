"""What a FIT task tells a device about the round's secure aggregation (the task's `secagg` bytes).

    SecAggTask(params, weighting, dp_clip, dp_noise_std)

The device trains, then encodes its delta d = trained − global in fixed point with weight w
(`weighting`: "examples" → w = min(num_examples, MAX_WEIGHT), FedAvg; "unit" → w = 1, DP-FedAvg),
after clipping d to L2 norm `dp_clip` and adding N(0, dp_noise_std²) per value when DP is on
(distributed DP: dp_noise_std = z·C/√n_exp, so the n_exp clients' noise sums to N(0, (zC)²)).
The masked vector (uint64, P + 1 values) travels over the ordinary upload stream with codec
`secagg-u64`: header length P (the model's), payload 8·(P + 1) bytes little-endian.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fedort.protos.errors import ProtocolError
from fedort.protos.secagg.messages import SecAggParams

SECAGG_CODEC = "secagg-u64"
MAX_WEIGHT = 65536.0        # FedAvg weights (example counts) are capped here under secure aggregation


def payload_words(length: int) -> int:
    """float32-sized words of a masked upload of a length-P model: 8·(P + 1) bytes."""
    return 2 * (length + 1)


@dataclass(frozen=True)
class SecAggTask:
    params: SecAggParams
    weighting: str = "examples"        # "examples" (FedAvg) | "unit" (DP-FedAvg: each client counts once)
    dp_clip: float | None = None       # L2 clip of the delta on the device (DP)
    dp_noise_std: float = 0.0          # this device's share of the Gaussian noise (distributed DP)

    def weight(self, num_examples: int) -> float:
        return 1.0 if self.weighting == "unit" else float(min(max(num_examples, 1), MAX_WEIGHT))

    def to_bytes(self) -> bytes:
        return json.dumps({"params": self.params.to_dict(), "weighting": self.weighting, "dp_clip": self.dp_clip,
                           "dp_noise_std": self.dp_noise_std}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "SecAggTask":
        try:
            d: dict[str, Any] = json.loads(data)
            return cls(SecAggParams.from_dict(d["params"]), str(d["weighting"]),
                       None if d["dp_clip"] is None else float(d["dp_clip"]), float(d["dp_noise_std"]))
        except (ValueError, KeyError, TypeError) as e:
            raise ProtocolError(f"task's secagg description is not a valid SecAggTask: {e}") from None
