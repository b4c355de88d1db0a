"""The wire boundary of the error tree: fedort exceptions <-> gRPC status codes, in one place.

`protos.errors` names each class's status code as a string so it imports without grpc; this
module is the only translation. The coordinator's servicer answers a failed RPC with
`status_for(exc)`; the edge transport turns a `grpc.RpcError` back into the fedort class for
its code with `from_rpc_error` (the class's `code` attribute then holds the code's name, and
`retry_after_s` the wait a server asked for in its `retry-after` trailer or message).
"""

from __future__ import annotations

import re
from typing import Any

import grpc

from fedort.common.errors import (
    FedortError,
    NotFoundError,
    PermissionDeniedError,
    ProtocolError,
    ResourceExhaustedError,
    StaleRoundError,
    UnauthenticatedError,
    UnavailableError,
)

#: The class a client raises for each status code a server answers with (else FedortError).
_BY_CODE: dict[grpc.StatusCode, type[FedortError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: ProtocolError,
    grpc.StatusCode.FAILED_PRECONDITION: StaleRoundError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
}


def grpc_code(name: str) -> grpc.StatusCode:
    """`grpc.StatusCode` for a code name such as "NOT_FOUND" (INTERNAL for a name gRPC lacks)."""
    return getattr(grpc.StatusCode, name, grpc.StatusCode.INTERNAL)


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and message a server answers with for `exc` (INTERNAL if unplanned)."""
    if isinstance(exc, FedortError):
        return grpc_code(exc.code), str(exc)
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"


def from_rpc_error(err: grpc.RpcError) -> FedortError:
    """The fedort error a client raises for a failed call (keeps the server's message and code)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    cls = _BY_CODE.get(code, FedortError)
    exc = cls(f"{code.name}: {details}")
    exc.code = code.name
    retry_after = _retry_after(err, details or "")
    if retry_after is not None:
        exc.retry_after_s = retry_after
    return exc


_RETRY_IN = re.compile(r"retry in (\d+(?:\.\d+)?) s")


def _retry_after(err: grpc.RpcError, details: str) -> float | None:
    """Seconds the server asked to wait: its `retry-after` trailing metadata, else 'retry in S s' in the message."""
    trailing: Any
    try:
        trailing = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    except Exception:  # noqa: BLE001 - a call object without metadata
        trailing = None
    pairs = trailing.items() if hasattr(trailing, "items") else (trailing or ())  # aio Metadata or tuples
    for pair in pairs:
        key, value = (pair.key, pair.value) if hasattr(pair, "key") else pair
        if str(key).lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                break
    match = _RETRY_IN.search(details)
    return float(match.group(1)) if match else None


__all__ = ["grpc_code", "status_for", "from_rpc_error"]


def from_status(name: str, message: str) -> FedortError:
    """The fedort error for a status code name and message carried inside a reply (e.g. a SecAggBatch entry)."""
    cls = _BY_CODE.get(grpc_code(name), FedortError)
    exc = cls(f"{name}: {message}")
    exc.code = name
    return exc
