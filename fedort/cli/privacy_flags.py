"""The privacy flags shared by `fedort coordinator serve` and `fedort simulate` (issue 10).

They are parsed and validated (`fedort.coordinator.privacy_config`) but the round engine does
not apply them yet, so `refuse_unwired_privacy` stops a run that asks for them rather than let
it run without the protection the user asked for. Remove the guard when the engine applies them.
"""

from __future__ import annotations

import argparse

PRIVACY_KEYS = ("secagg", "secagg_threshold", "secagg_neighbours", "secagg_clip", "secagg_scale",
                "dp_noise_multiplier", "dp_clip", "dp_delta", "dp_target_epsilon")


def add_privacy_flags(parser: argparse.ArgumentParser) -> None:
    """--secagg* and --dp-* (shared with `fedort simulate`); parsed and validated, NOT YET APPLIED."""
    group = parser.add_argument_group("privacy (issue 10: parsed and validated, not yet applied by the round engine)")
    group.add_argument("--secagg", action="store_true", default=None,
                       help="secure aggregation (SecAgg+): the coordinator only sees the masked sum")
    group.add_argument("--secagg-threshold", metavar="T", type=int,
                       help="shares needed to recover a client's secrets (default: a majority of its neighbours)")
    group.add_argument("--secagg-neighbours", metavar="K", type=int,
                       help="SecAgg+ graph degree (default cohort - 1: classic SecAgg)")
    group.add_argument("--secagg-clip", metavar="C", type=float, help="fixed point: values clipped to [-C, C] (default 1.0)")
    group.add_argument("--secagg-scale", metavar="S", type=float, help="fixed point: values times S, rounded (default 65536)")
    group.add_argument("--dp-noise-multiplier", metavar="Z", type=float,
                       help="user-level DP: Gaussian noise std Z*C on the sum of clipped deltas (default 0: off)")
    group.add_argument("--dp-clip", metavar="C|adaptive[:Q]",
                       help="L2 clip norm of each client's delta, or adaptive toward quantile Q (default 0.5)")
    group.add_argument("--dp-delta", metavar="D", type=float, help="delta of the reported (epsilon, delta) (default 1e-5)")
    group.add_argument("--dp-target-epsilon", metavar="E", type=float,
                       help="stop before the round that would exceed epsilon E")


def refuse_unwired_privacy(values: dict) -> None:
    """Until the round engine applies them (issue 10), privacy flags stop the run instead of being ignored."""
    from fedort.coordinator.privacy_config import NOT_WIRED, privacy_requested
    from fedort.protos.errors import ConfigError

    names = privacy_requested(values)
    if names:
        raise ConfigError(NOT_WIRED.format(names=names))
