"""What a FIT task tells a device about the round's secure aggregation (the task's `secagg` bytes).

    SecAggTask(params, weighting, dp_clip, dp_noise_std, codec)

The device trains, then encodes its delta d = trained − global in fixed point with weight w
(`weighting`: "examples" → w = min(num_examples, w_max), FedAvg; "unit" → w = 1, DP-FedAvg; w_max is
the round's `fixed_point.max_weight`: MAX_WEIGHT, or under the scheme aes128ctr-p130 the largest
example count the cohort announced at Join (`weight_cap`), which keeps b — and every masked upload —
small: 100 clients of ≤ 64 examples need 30 bits a word instead of 40),
after clipping d to L2 norm `dp_clip` and adding N(0, dp_noise_std²) per value when DP is on
(distributed DP: dp_noise_std = z·C/√n_exp, so the n_exp clients' noise sums to N(0, (zC)²)).
The masked vector (P + 1 words mod 2^b) travels over the ordinary upload stream in the `codec`
the coordinator names (`protos.secagg.pack`): `secagg-packed:b` (b/8 bytes a word; what a
coordinator asks for since it rounds b up to whole bytes) or `secagg-u64` (8 bytes a word; what a
device sends when the task names no codec, i.e. an older coordinator, which still accepts it).
Header length P (the model's).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from fedort.common.errors import ProtocolError, VectorError
from fedort.common.secagg.messages import SecAggParams
from fedort.common.secagg.pack import U64_CODEC, is_masked, packed_bits

SECAGG_CODEC = U64_CODEC
MAX_WEIGHT = 65536.0  # FedAvg weights (example counts) are capped here under secure aggregation


def weight_cap(devices: Iterable[Mapping[str, str]]) -> float:
    """w_max for a cohort: the largest `examples` its devices announced at Join (MAX_WEIGHT if any did not).
    A device whose data grew since clamps its weight to it (`SecAggTask.weight`)."""
    cap = 1
    for caps in devices:
        try:
            cap = max(cap, int(caps["examples"]))
        except (KeyError, ValueError):
            return MAX_WEIGHT
    return float(min(cap, MAX_WEIGHT))


def _fits(codec: str, bits: int) -> bool:
    """Whether `codec` can carry this round's `bits`-bit masked words."""
    try:
        return codec == SECAGG_CODEC or (is_masked(codec) and packed_bits(codec) == bits)
    except VectorError:
        return False


@dataclass(frozen=True)
class SecAggTask:
    params: SecAggParams
    weighting: str = "examples"  # "examples" (FedAvg) | "unit" (DP-FedAvg: each client counts once)
    dp_clip: float | None = None  # L2 clip of the delta on the device (DP)
    dp_noise_std: float = 0.0  # this device's share of the Gaussian noise (distributed DP)
    codec: str = SECAGG_CODEC  # the masked upload's wire codec (secagg-u64 | secagg-packed:b)

    def weight(self, num_examples: int) -> float:
        cap = min(MAX_WEIGHT, self.params.fixed_point.max_weight)
        return 1.0 if self.weighting == "unit" else float(min(max(num_examples, 1), cap))

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "params": self.params.to_dict(),
                "weighting": self.weighting,
                "dp_clip": self.dp_clip,
                "dp_noise_std": self.dp_noise_std,
                "codec": self.codec,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> SecAggTask:
        """The task the bytes describe (ProtocolError if they describe none); the same bytes give the same
        (immutable) task, parsed once per process: a simulation worker's devices all read one round's."""
        return _parsed(bytes(data))

    @classmethod
    def _parse(cls, data: bytes) -> SecAggTask:
        try:
            d: dict[str, Any] = json.loads(data)
            task = cls(
                SecAggParams.from_dict(d["params"]),
                str(d["weighting"]),
                None if d["dp_clip"] is None else float(d["dp_clip"]),
                float(d["dp_noise_std"]),
                str(d.get("codec", SECAGG_CODEC)),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ProtocolError(f"task's secagg description is not a valid SecAggTask: {e}") from None
        if not _fits(task.codec, task.params.fixed_point.bits):
            raise ProtocolError(
                f"task's secagg codec {task.codec!r} is not a masked codec for {task.params.fixed_point.bits}-bit words"
            )
        return task


@lru_cache(maxsize=8)
def _parsed(data: bytes) -> SecAggTask:
    return SecAggTask._parse(data)
