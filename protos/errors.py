"""The one exception tree of fedort, and the one place it meets gRPC status codes.

    FedortError
     +-- ConfigError            bad flag, config file or argument        INVALID_ARGUMENT
     +-- DataError              data arrays that do not fit the model    INVALID_ARGUMENT
     +-- VectorError            parameter vector of wrong length/dtype   INVALID_ARGUMENT
     +-- ArtifactError          missing or corrupt training artifacts    FAILED_PRECONDITION
     +-- TrainingError          ONNX Runtime refused a step              INTERNAL
     +-- ProtocolError          a peer broke the wire contract           INVALID_ARGUMENT
          +-- StaleRoundError      update/task for a round not open      FAILED_PRECONDITION
          |    +-- TooStaleError   async update older than max staleness FAILED_PRECONDITION
          +-- WrongModelError      model id differs from the run's       FAILED_PRECONDITION
          +-- NotFoundError        unknown client, artifact, round       NOT_FOUND
          +-- UnauthenticatedError missing or bad credential             UNAUTHENTICATED
          +-- PermissionDeniedError acting as another identity           PERMISSION_DENIED
          +-- ResourceExhaustedError over a size or rate limit           RESOURCE_EXHAUSTED
          +-- UnavailableError     coordinator not serving (yet/anymore) UNAVAILABLE

Servers raise these and `status_for` turns them into a status code once, in the servicer's
error boundary; clients turn a `grpc.RpcError` back into the same class with `from_rpc_error`,
so both ends speak one vocabulary.
"""

from __future__ import annotations

import grpc


class FedortError(Exception):
    """Root of every error fedort raises on purpose."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class ConfigError(FedortError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DataError(FedortError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class VectorError(FedortError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class ArtifactError(FedortError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class TrainingError(FedortError):
    code = grpc.StatusCode.INTERNAL


class ProtocolError(FedortError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class StaleRoundError(ProtocolError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class TooStaleError(StaleRoundError):
    """An asynchronous (FedBuff) update trained on a global version more than max-staleness behind."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class WrongModelError(ProtocolError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class NotFoundError(ProtocolError):
    code = grpc.StatusCode.NOT_FOUND


class UnauthenticatedError(ProtocolError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDeniedError(ProtocolError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(ProtocolError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnavailableError(ProtocolError):
    code = grpc.StatusCode.UNAVAILABLE


_BY_CODE: dict[grpc.StatusCode, type[FedortError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: ProtocolError,
    grpc.StatusCode.FAILED_PRECONDITION: StaleRoundError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
}


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and message a server answers with for `exc` (INTERNAL if unplanned)."""
    if isinstance(exc, FedortError):
        return exc.code, str(exc)
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"


def from_rpc_error(err: grpc.RpcError) -> FedortError:
    """The fedort error a client raises for a failed call (keeps the server's message)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    cls = _BY_CODE.get(code, FedortError)
    exc = cls(f"{code.name}: {details}")
    exc.code = code
    return exc


__all__ = [
    "FedortError", "ConfigError", "DataError", "VectorError", "ArtifactError", "TrainingError",
    "ProtocolError", "StaleRoundError", "TooStaleError", "WrongModelError", "NotFoundError", "UnauthenticatedError",
    "PermissionDeniedError", "ResourceExhaustedError", "UnavailableError",
    "status_for", "from_rpc_error",
]
