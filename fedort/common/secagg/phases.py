"""The phases of a secure-aggregation round, in order; both the coordinator and the device step through them."""

from __future__ import annotations

from enum import Enum


class Phase(Enum):
    ADVERTISE = "advertise"
    SHARE_KEYS = "share_keys"
    MASKED_INPUT = "masked_input"
    UNMASK = "unmask"
    DONE = "done"
    FAILED = "failed"  # the coordinator's round only: aborted, with a reason


__all__ = ["Phase"]
