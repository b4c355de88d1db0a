"""How a run ends, as the device sees it: DONE from PollTask does not say whether it succeeded; a Leave on the way out.

The coordinator answers DONE both when every round committed and when the run FAILED (it
releases its clients either way), so the device asks the Status RPC once and exits non-zero
for a FAILED run (`fedort edge run` exit code 1) instead of printing "done". A device that stops (or
whose data does not fit the model) says Leave, best-effort, so that it is not selected again.
"""

from __future__ import annotations

import logging

from fedort.common.errors import FedortError
from fedort.common.round_state import RoundState
from fedort.edge_client.transport.grpc_transport import Transport

log = logging.getLogger("fedort.edge")


def final_outcome(transport: Transport, client_id: str = "") -> str:
    """'failed' when the coordinator's status says the run FAILED, else 'done'. Naming `client_id`
    tells the coordinator this device has its answer (it keeps serving until every device has)."""
    try:
        state = transport.status(client_id).state
    except FedortError as e:
        log.warning("coordinator says the run is over; could not ask whether it succeeded: %s", e)
        return "done"
    if state is RoundState.FAILED:
        log.error("coordinator says the run is over: it FAILED (its log and `fedort coordinator status` say why)")
        return "failed"
    log.info("coordinator says the run is done")
    return "done"


def leave_quietly(transport: Transport, client_id: str, reason: str) -> None:
    """Best-effort Leave with a short deadline (on the way out, never raises)."""
    try:
        transport.leave(client_id, reason, timeout_s=2.0, after_stop=True)
    except FedortError as e:
        log.debug("leave failed: %s", e)


__all__ = ["final_outcome", "leave_quietly"]
