"""Local federated simulations on the real components, and their public handles.

    from fedort.simulations import LocalCoordinator, round_timeline, run_simulation

Names load on first use, so a worker process that imports `fedort.simulations.worker` does not
pull in the coordinator.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "LocalCoordinator": "fedort.simulations.local_coordinator",
    "round_timeline": "fedort.coordinator.status",
    "run_simulation": "fedort.simulations.runner",
    "coordinator_config": "fedort.simulations.runner",
    "WorkerPlan": "fedort.simulations.worker",
    "WorkerStats": "fedort.simulations.worker",
    "run_worker": "fedort.simulations.worker",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fedort.simulations' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
