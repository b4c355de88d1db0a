"""The wire boundary of the error tree: fedort exceptions <-> gRPC status codes, in one place.

`protos.errors` names each class's status code as a string so it imports without grpc; this
module is the only translation. The coordinator's servicer answers a failed RPC with
`status_for(exc)`; the edge transport turns a `grpc.RpcError` back into the fedort class for
its code with `from_rpc_error` (the class's `code` attribute then holds the code's name).
"""

from __future__ import annotations

import grpc

from fedort.protos.errors import (
    FedortError, NotFoundError, PermissionDeniedError, ProtocolError, ResourceExhaustedError, StaleRoundError,
    UnauthenticatedError, UnavailableError,
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
    return exc


__all__ = ["grpc_code", "status_for", "from_rpc_error"]
