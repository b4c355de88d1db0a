"""The fedort coordinator: gRPC server, round engine, streaming FedAvg, durable state, model export.

    from fedort.coordinator import Coordinator, CoordinatorConfig
"""

from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.round_engine import RunOutcome
from fedort.protos.round_state import RoundState
from fedort.coordinator.server import Coordinator

__all__ = ["Coordinator", "CoordinatorConfig", "RoundState", "RunOutcome"]
