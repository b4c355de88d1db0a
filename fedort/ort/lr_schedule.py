"""ORT's linear learning-rate schedule, made the way its documentation reads.

`LinearLRScheduler` warms up linearly from 0 to the initial rate over `warmup_step_count` optimizer
steps, then decays linearly to 0 at `total_step_count`. ORT 1.19.2's Python wrapper hands its (warmup,
total) arguments to the native scheduler in the opposite order, so `linear_scheduler` passes them
swapped; tests/ort/test_session.py checks the resulting schedule.
"""

from __future__ import annotations

import warnings
from typing import Any

from fedort.common.errors import ConfigError

_RENAMES = {"warmup_steps": "warmup_step_count", "total_steps": "total_step_count"}


def linear_scheduler(api: Any, optimizer: Any, warmup: int, total: int, initial_lr: float) -> Any:
    """ORT's LinearLRScheduler over `optimizer` that warms up over `warmup` steps and ends at `total`."""
    if not (0 <= warmup <= total) or total <= 0:
        raise ConfigError(
            f"need 0 <= warmup_step_count <= total_step_count and total_step_count > 0, got {warmup}, {total}"
        )
    return api.LinearLRScheduler(optimizer, total, warmup, float(initial_lr))  # swapped: see the module docstring


def scheduler_counts(warmup: int | None, total: int | None, old_names: dict) -> tuple[int, int]:
    """(warmup_step_count, total_step_count), accepting the deprecated `warmup_steps` / `total_steps` keywords."""
    unknown = sorted(set(old_names) - set(_RENAMES))
    if unknown:
        raise TypeError(f"register_linear_lr_scheduler() got unexpected keyword arguments {unknown}")
    used = [old for old in _RENAMES if old in old_names]
    if used:
        warnings.warn(
            f"register_linear_lr_scheduler({'=, '.join(used)}=) is deprecated; use "
            f"{'=, '.join(_RENAMES[o] for o in used)}= (ORT's names)",
            DeprecationWarning,
            stacklevel=3,
        )
    warmup = old_names.get("warmup_steps", warmup)
    total = old_names.get("total_steps", total)
    if warmup is None or total is None:
        raise TypeError("register_linear_lr_scheduler() needs warmup_step_count and total_step_count")
    return int(warmup), int(total)


__all__ = ["linear_scheduler", "scheduler_counts"]
