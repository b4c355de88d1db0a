"""A client's calls to the coordinator: each retried with backoff (`transport.retry`), until it succeeds, fails
for good or the client stops.

Two readings sit on top of the retries. A coordinator that lost the client's registration ("unknown
client", NOT_FOUND) gets a re-Join and the call once more. A submission refused with FAILED_PRECONDITION
(the round closed meanwhile, or this client is not in it) is the outcome "stale", after a re-Join that
would notice a coordinator now running another model (WrongModelError).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from fedort.common.errors import FedortError, NotFoundError
from fedort.edge_client.transport.retry import Backoff, call_with_retry
from fedort.protos.messages import SubmitResult

log = logging.getLogger("fedort.edge")

T = TypeVar("T")


class ClientCalls:
    """`calls(what, fn)` runs `fn()` with retries (see the module docstring); `rejoin` is set once joined."""

    def __init__(self, backoff: Backoff, stop: threading.Event) -> None:
        self.backoff = backoff
        self.stop = stop
        self.rejoin: Callable[[], None] | None = None

    def __call__(self, what: str, fn: Callable[[], T]) -> T:
        """`fn()` with retries; an 'unknown client' (the coordinator lost our row) re-joins once."""
        try:
            return self.retried(what, fn)
        except NotFoundError as e:
            if "unknown client" not in str(e) or self.rejoin is None:
                raise
            log.warning("the coordinator does not know this client any more; joining again")
            self.rejoin()
            return self.retried(what, fn)

    def retried(self, what: str, fn: Callable[[], T]) -> T:
        """`fn()` with retries only (what a re-Join itself runs)."""
        return call_with_retry(fn, self.backoff, what=what, stop=self.stop)

    def submit(self, what: str, fn: Callable[[], SubmitResult]) -> tuple[str, str]:
        """Submit; returns (outcome, message): accepted, duplicate, rejected, or stale (FAILED_PRECONDITION)."""
        try:
            result = self(what, fn)
        except FedortError as e:
            if getattr(e, "code", None) != "FAILED_PRECONDITION" or self.rejoin is None:
                raise
            self.rejoin()  # a different model on the coordinator is fatal (WrongModelError)
            return "stale", str(e)
        outcome = "duplicate" if result.duplicate else ("accepted" if result.accepted else "rejected")
        return outcome, result.message


__all__ = ["ClientCalls"]
