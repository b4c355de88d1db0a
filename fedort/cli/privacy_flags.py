"""The privacy flags shared by `fedort coordinator serve` and `fedort simulate`.

Validated by `fedort.coordinator.privacy.config` and applied by the round engine
(`fedort.coordinator.privacy.round_privacy`): DP-FedAvg with accounting, and secure aggregation.
"""

from __future__ import annotations

import argparse

# the CoordinatorConfig / SimulationConfig fields these flags set: PrivacySettings' fields. privacy_config
# imports only the standard library and protos.errors (the coordinator package loads its parts lazily)
from fedort.coordinator.privacy.config import PRIVACY_KEYS


def add_privacy_flags(parser: argparse.ArgumentParser) -> None:
    """--secagg* and --dp-* (shared with `fedort simulate`)."""
    group = parser.add_argument_group('privacy (see README "Privacy" for what each option protects)')
    group.add_argument(
        "--secagg",
        action="store_true",
        default=None,
        help="secure aggregation (SecAgg+): the coordinator only sees the masked sum",
    )
    group.add_argument(
        "--secagg-threshold",
        metavar="T",
        type=int,
        help="shares needed to recover a client's secrets (default: a majority of its neighbours)",
    )
    group.add_argument(
        "--secagg-neighbours",
        metavar="K",
        type=int,
        help="SecAgg+ graph degree (default: cohort - 1 up to 17 clients, else "
        "max(16, 2*ceil(log2 n) + 4); K >= cohort - 1 is classic SecAgg)",
    )
    group.add_argument(
        "--secagg-clip",
        metavar="C",
        type=float,
        help="fixed point: each value of a client's delta clipped to [-C, C] (default 1.0)",
    )
    group.add_argument(
        "--secagg-scale", metavar="S", type=float, help="fixed point: values times S, rounded (default 65536)"
    )
    group.add_argument(
        "--dp-noise-multiplier",
        metavar="Z",
        type=float,
        help="user-level DP: Gaussian noise std Z*C on the sum of clipped deltas (default 0: off)",
    )
    group.add_argument(
        "--dp-clip",
        metavar="C|adaptive[:Q]",
        help="L2 clip norm of each client's delta, or adaptive toward quantile Q (default: off; Q defaults to 0.5)",
    )
    group.add_argument(
        "--dp-delta", metavar="D", type=float, help="delta of the reported (epsilon, delta) (default 1e-5)"
    )
    group.add_argument(
        "--dp-target-epsilon", metavar="E", type=float, help="stop before the round that would exceed epsilon E"
    )


__all__ = ["PRIVACY_KEYS", "add_privacy_flags"]
