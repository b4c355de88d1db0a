"""The fedort coordinator: gRPC server, round engine, streaming FedAvg, durable state, model export.

    from fedort.coordinator import Coordinator, CoordinatorConfig

Names load on first use (PEP 562), so importing one part (`fedort.coordinator.aggregation` to
check a strategy spec) does not load the server, gRPC and ONNX Runtime with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedort.common.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Coordinator": "fedort.coordinator.server",
    "CoordinatorConfig": "fedort.coordinator.config",
    "RoundState": "fedort.common.round_state",
    "RunOutcome": "fedort.coordinator.engine.round_engine",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:
    from fedort.common.round_state import RoundState
    from fedort.coordinator.config import CoordinatorConfig
    from fedort.coordinator.engine.round_engine import RunOutcome
    from fedort.coordinator.server import Coordinator
