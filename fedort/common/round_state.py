"""The round life cycle's names, shared by the coordinator (which drives it) and the edge (which reads it).

`RoundState` is the engine's state, sent as its name in HeartbeatReply.state and StatusReply.state;
`RoundRowState` is a round's durable milestone in the state database (StatusReply.rounds[].state);
`RunState` is the run's, recorded in the database's meta table.
"""

from __future__ import annotations

import enum

from fedort.common.errors import ProtocolError


class RoundState(enum.Enum):
    WAITING_FOR_CLIENTS = "WAITING_FOR_CLIENTS"
    TRAINING = "TRAINING"
    AGGREGATING = "AGGREGATING"
    EXPORTING = "EXPORTING"
    EVALUATING = "EVALUATING"
    DONE = "DONE"
    FAILED = "FAILED"

    @property
    def final(self) -> bool:
        """The run is over: no more work will be handed out."""
        return self in (RoundState.DONE, RoundState.FAILED)

    @property
    def hands_out_work(self) -> bool:
        """Selected clients get tasks now (FIT while TRAINING, EVALUATE while EVALUATING)."""
        return self in (RoundState.TRAINING, RoundState.EVALUATING)

    @classmethod
    def from_wire(cls, name: str) -> RoundState:
        """The state a wire string names (ProtocolError for a name this version does not know)."""
        return _from_wire(cls, name)


class RoundRowState(enum.Enum):
    OPEN = "TRAINING"  # selected clients train; updates are being accepted
    COMMITTED = "COMMITTED"  # the round's result vector is durable and final
    EXPORTED = "EXPORTED"  # ... and its inference model is written
    FAILED = "FAILED"

    @property
    def committed(self) -> bool:
        return self in (RoundRowState.COMMITTED, RoundRowState.EXPORTED)

    @classmethod
    def from_wire(cls, name: str) -> RoundRowState:
        return _from_wire(cls, name)


class RunState(enum.Enum):
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"


def _from_wire(cls: type[enum.Enum], value: str):
    try:
        return cls(value)
    except ValueError:
        raise ProtocolError(
            f"the coordinator reports a {cls.__name__} {value!r}; this version knows {[m.value for m in cls]}"
        ) from None
