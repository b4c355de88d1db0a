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

Each class names its gRPC status code as a plain string (`code`, e.g. "INVALID_ARGUMENT"), so
this module imports without grpc (a device-side `DataError` needs no wire library). The one
mapping to and from `grpc.StatusCode` lives at the wire boundary, `protos/status_codes.py`:
servers answer with `status_for(exc)`, clients turn a `grpc.RpcError` back into the same class
with `from_rpc_error`, so both ends speak one vocabulary.
"""

from __future__ import annotations


class FedortError(Exception):
    """Root of every error fedort raises on purpose; `code` is its gRPC status code's name."""

    code: str = "INTERNAL"


class ConfigError(FedortError):
    code = "INVALID_ARGUMENT"


class DataError(FedortError):
    code = "INVALID_ARGUMENT"


class VectorError(FedortError):
    code = "INVALID_ARGUMENT"


class ArtifactError(FedortError):
    code = "FAILED_PRECONDITION"


class TrainingError(FedortError):
    code = "INTERNAL"


class ProtocolError(FedortError):
    code = "INVALID_ARGUMENT"


class StaleRoundError(ProtocolError):
    code = "FAILED_PRECONDITION"


class TooStaleError(StaleRoundError):
    """An asynchronous (FedBuff) update trained on a global version more than max-staleness behind."""

    code = "FAILED_PRECONDITION"


class WrongModelError(ProtocolError):
    code = "FAILED_PRECONDITION"


class NotFoundError(ProtocolError):
    code = "NOT_FOUND"


class UnauthenticatedError(ProtocolError):
    code = "UNAUTHENTICATED"


class PermissionDeniedError(ProtocolError):
    code = "PERMISSION_DENIED"


class ResourceExhaustedError(ProtocolError):
    code = "RESOURCE_EXHAUSTED"


class UnavailableError(ProtocolError):
    code = "UNAVAILABLE"


__all__ = [
    "FedortError", "ConfigError", "DataError", "VectorError", "ArtifactError", "TrainingError",
    "ProtocolError", "StaleRoundError", "TooStaleError", "WrongModelError", "NotFoundError", "UnauthenticatedError",
    "PermissionDeniedError", "ResourceExhaustedError", "UnavailableError",
]
