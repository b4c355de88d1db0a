"""Local federated simulations on the real components, and their public handles.

    from fedort.simulations import LocalCoordinator, round_timeline, run_simulation

Names load on first use, so a worker process that imports `fedort.simulations.workers.worker` does not
pull in the coordinator.
"""

from __future__ import annotations

from fedort.common.lazy import lazy_exports

_EXPORTS = {
    "LocalCoordinator": "fedort.simulations.local_coordinator",
    "round_timeline": "fedort.coordinator.status",
    "run_simulation": "fedort.simulations.runner",
    "coordinator_config": "fedort.simulations.coordinator_settings",
    "WorkerPlan": "fedort.simulations.workers.worker",
    "WorkerStats": "fedort.simulations.workers.worker",
    "run_worker": "fedort.simulations.workers.worker",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
