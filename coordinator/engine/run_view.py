"""What the engine's collaborators read of a run as it moves, and how they wait for it to change.

The round engine (synchronous or asynchronous) satisfies `RunView`; dispatch, the evaluation phase,
the upload intake and the round's close take it instead of the engine, so each sees only the run's
current state, round, open round and global vector, and the change signal.
"""

from __future__ import annotations

from typing import Protocol

from fedort.common.round_state import RoundState
from fedort.coordinator.engine.training_round import GlobalVector, TrainingRound


class RunView(Protocol):
    """The run's moving parts, read-only, and its change signal (only the engine's event loop writes them)."""

    @property
    def state(self) -> RoundState: ...

    @property
    def round(self) -> int: ...

    @property
    def training(self) -> TrainingRound | None: ...

    @property
    def global_vector(self) -> GlobalVector | None: ...

    @property
    def stopping(self) -> bool:
        """The server is stopping: held calls answer now and no new ones are held."""
        ...

    def notify(self) -> None:
        """Wake everything waiting in `wait_change`: something changed."""
        ...

    async def wait_change(self, timeout: float) -> None:
        """Until the next `notify` or `timeout` s, whichever comes first."""
        ...
