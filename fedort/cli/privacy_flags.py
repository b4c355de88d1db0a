"""The privacy flags shared by `fedort coordinator serve` and `fedort simulate`, made from the privacy section.

Validated by `fedort.coordinator.privacy.config` and applied by the round engine
(`fedort.coordinator.privacy.round_privacy`): DP-FedAvg with accounting, and secure aggregation.
"""

from __future__ import annotations

import argparse

from fedort.common.settings.options import add_flags, options

# PrivacySettings imports only the standard library and fedort.common (the coordinator package loads its
# parts lazily), so `fedort simulate` parses its flags without loading the coordinator
from fedort.coordinator.privacy.config import PRIVACY_KEYS, PrivacySettings


def add_privacy_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per PrivacySettings key (`--secagg`, `--dp-clip`, ...), in a group of their own."""
    group = parser.add_argument_group('privacy (see README "Privacy" for what each option protects)')
    add_flags(group, options(PrivacySettings, "privacy"))


__all__ = ["PRIVACY_KEYS", "add_privacy_flags"]
