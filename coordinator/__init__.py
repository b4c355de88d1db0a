"""The fedort coordinator: gRPC server, round engine, streaming FedAvg, durable state, model export.

    from coordinator import Coordinator, CoordinatorConfig
"""

from coordinator.config import CoordinatorConfig
from coordinator.rounds import RoundState, RunOutcome
from coordinator.server import Coordinator

__all__ = ["Coordinator", "CoordinatorConfig", "RoundState", "RunOutcome"]
