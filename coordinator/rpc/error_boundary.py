"""The servicer's error boundary: every handler authenticated first, every failure one status code.

`unary` and `streaming` wrap a handler so that the call is authenticated (`Served.authenticate`)
and a malformed request refused before the handler runs, and every exception it raises ends the
call with `context.abort(code, message)` via `status_for`: a `FedortError` as its planned code,
anything unplanned as INTERNAL (logged with its traceback). A full disk becomes UNAVAILABLE
"coordinator storage full", a message is cut to 1024 characters (it may quote client strings), a
wait the caller must keep travels as `retry-after` trailing metadata, and every failure is counted.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from fedort.common.errors import FedortError, ProtocolError
from fedort.coordinator.rpc.join_limits import clip
from fedort.coordinator.rpc.malformed import reject_malformed
from fedort.coordinator.rpc.monitoring import Monitoring
from fedort.coordinator.state.storage import storage_error
from fedort.protos.status_codes import status_for

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 1024
MAX_ROUND = (1 << 63) - 1  # rounds are SQLite integers

#: The authenticated client id of the call being served (None with open auth); set by `Served.authenticate`.
caller: contextvars.ContextVar[str | None] = contextvars.ContextVar("fedort_caller", default=None)


class Served(Protocol):
    """What the boundary needs of the object whose handlers it wraps."""

    monitor: Monitoring

    def authenticate(self, request: Any, context: Any) -> None:
        """Raise (UNAUTHENTICATED, PERMISSION_DENIED, ...) unless the call may be served; sets `caller`."""


def check_round(round: int) -> None:
    """ProtocolError (INVALID_ARGUMENT) for a round number no run reaches (SQLite stores at most 2**63 - 1)."""
    if not 0 <= round <= MAX_ROUND:
        raise ProtocolError(f"round must be in 0..{MAX_ROUND}, got {round}")


async def abort(context: grpc.aio.ServicerContext, method: str, exc: BaseException, monitor: Monitoring) -> None:
    """End the call with the status `exc` maps to (see the module docstring)."""
    exc = storage_error(exc) or exc  # disk full -> UNAVAILABLE "coordinator storage full" (clients retry)
    monitor.call_failed(method, exc)
    code, message = status_for(exc)
    message = clip(message, MAX_MESSAGE_CHARS)  # client-chosen strings end up in messages: never echo them unbounded
    if (retry_after := getattr(exc, "retry_after_s", None)) is not None:
        context.set_trailing_metadata((("retry-after", f"{retry_after:.3f}"),))
    if isinstance(exc, FedortError):
        log.debug("%s -> %s: %s", method, code.name, message)
    else:
        log.error("%s failed unexpectedly", method, exc_info=exc)
    await context.abort(code, message)


def unary(fn: Callable) -> Callable:
    """Error boundary for unary-response handlers."""

    @functools.wraps(fn)
    async def wrapper(self: Served, request, context):
        try:
            self.authenticate(request, context)
            reject_malformed(request)
            return await fn(self, request, context)
        except Exception as e:
            if isinstance(e, grpc.aio.AbortError):
                raise
            await abort(context, fn.__name__, e, self.monitor)

    return wrapper


def streaming(fn: Callable) -> Callable:
    """Error boundary for server-streaming handlers (async generators)."""

    @functools.wraps(fn)
    async def wrapper(self: Served, request, context):
        try:
            self.authenticate(request, context)
            reject_malformed(request)
            async for item in fn(self, request, context):
                yield item
        except Exception as e:
            if isinstance(e, grpc.aio.AbortError):
                raise
            await abort(context, fn.__name__, e, self.monitor)

    return wrapper


__all__ = ["MAX_ROUND", "Served", "abort", "caller", "check_round", "streaming", "unary"]
