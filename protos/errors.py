"""The one exception tree of fedort, and the one place it meets gRPC status codes.

    FedortError
     +-- ConfigError            bad flag, config file or argument        INVALID_ARGUMENT
     |    +-- CorruptStateError    a state-dir file fails its recorded hash DATA_LOSS
     +-- StorageError           the coordinator's disk is full           UNAVAILABLE
     +-- DataError              data arrays that do not fit the model    INVALID_ARGUMENT
     +-- VectorError            parameter vector of wrong length/dtype   INVALID_ARGUMENT
     +-- ArtifactError          missing or corrupt training artifacts    FAILED_PRECONDITION
     +-- TrainingError          ONNX Runtime refused a step              INTERNAL
     +-- ProtocolError          a peer broke the wire contract           INVALID_ARGUMENT
          +-- StaleRoundError      update/task for a round not open      FAILED_PRECONDITION
          +-- WrongModelError      model id differs from the run's       FAILED_PRECONDITION
          +-- NotFoundError        unknown client, artifact, round       NOT_FOUND
          +-- UnauthenticatedError missing or bad credential             UNAUTHENTICATED
          +-- PermissionDeniedError acting as another identity           PERMISSION_DENIED
          +-- ResourceExhaustedError over a size or rate limit           RESOURCE_EXHAUSTED
          +-- UnavailableError     coordinator not serving (yet/anymore) UNAVAILABLE
               +-- CertificateError  the peer's TLS certificate failed verification (never retried)

Servers raise these and `status_for` turns them into a status code once, in the servicer's
error boundary; clients turn a `grpc.RpcError` back into the same class with `from_rpc_error`,
so both ends speak one vocabulary.
"""

from __future__ import annotations

import re

import grpc


class FedortError(Exception):
    """Root of every error fedort raises on purpose."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class ConfigError(FedortError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class CorruptStateError(ConfigError):
    """A file of the state dir does not match the hash (or length) the database recorded for it."""

    code = grpc.StatusCode.DATA_LOSS


class StorageError(FedortError):
    """The coordinator could not write its state (disk or quota full): retryable once space returns."""

    code = grpc.StatusCode.UNAVAILABLE


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


class CertificateError(UnavailableError):
    """TLS certificate verification failed: gRPC says UNAVAILABLE, but waiting cannot heal it."""


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
    retry_after = _retry_after(err, details or "")
    if retry_after is not None:
        exc.retry_after_s = retry_after
    return exc


_RETRY_IN = re.compile(r"retry in (\d+(?:\.\d+)?) s")


def _retry_after(err: grpc.RpcError, details: str) -> float | None:
    """Seconds the server asked to wait: its `retry-after` trailing metadata, else 'retry in S s' in the message."""
    try:
        trailing = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    except Exception:  # noqa: BLE001 - a call object without metadata
        trailing = None
    pairs = trailing.items() if hasattr(trailing, "items") else (trailing or ())   # aio Metadata or tuples
    for pair in pairs:
        key, value = (pair.key, pair.value) if hasattr(pair, "key") else pair
        if str(key).lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                break
    match = _RETRY_IN.search(details)
    return float(match.group(1)) if match else None


__all__ = [
    "FedortError", "ConfigError", "CorruptStateError", "StorageError", "DataError", "VectorError", "ArtifactError", "TrainingError",
    "ProtocolError", "StaleRoundError", "WrongModelError", "NotFoundError", "UnauthenticatedError",
    "PermissionDeniedError", "ResourceExhaustedError", "UnavailableError", "CertificateError",
    "status_for", "from_rpc_error",
]
