"""The one exception tree of fedort; each class names its gRPC status code.

    FedortError
     +-- ConfigError            bad flag, config file or argument        INVALID_ARGUMENT
     |    +-- MissingExtraError    an optional extra (fedort[sim], ...) is not installed
     |    +-- CorruptStateError    a state-dir file fails its recorded hash DATA_LOSS
     +-- StorageError           the coordinator's disk is full           UNAVAILABLE
     +-- DataError              data arrays that do not fit the model    INVALID_ARGUMENT
     +-- VectorError            parameter vector of wrong length/dtype   INVALID_ARGUMENT
     +-- ArtifactError          missing or corrupt training artifacts    FAILED_PRECONDITION
     +-- TrainingError          ONNX Runtime refused a step              INTERNAL
     +-- StorageError           the coordinator's disk is full (ENOSPC)  UNAVAILABLE (retryable)
     +-- ProtocolError          a peer broke the wire contract           INVALID_ARGUMENT
          +-- StaleRoundError      update/task for a round not open      FAILED_PRECONDITION
          |    +-- TooStaleError   async update older than max staleness FAILED_PRECONDITION
          +-- WrongModelError      model id differs from the run's       FAILED_PRECONDITION
          +-- UploadOffsetError    resumable part not at the upload's offset FAILED_PRECONDITION
          +-- CapabilityError      device lacks what the run requires    FAILED_PRECONDITION
          +-- NotFoundError        unknown client, artifact, round       NOT_FOUND
          +-- UnauthenticatedError missing or bad credential             UNAUTHENTICATED
          +-- PermissionDeniedError acting as another identity           PERMISSION_DENIED
          +-- ResourceExhaustedError over a size or rate limit           RESOURCE_EXHAUSTED
          +-- UnavailableError     coordinator not serving (yet/anymore) UNAVAILABLE
               +-- CertificateError  the peer's TLS certificate failed verification (never retried)

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
    retry_after_s: float | None = None  # the wait a server asked for (RESOURCE_EXHAUSTED, UNAVAILABLE), if any


class ConfigError(FedortError):
    code = "INVALID_ARGUMENT"


class MissingExtraError(ConfigError):
    """A command needs an optional extra that is not installed; `extra` names it (`pip install 'fedort[X]'`)."""

    def __init__(self, message: str, extra: str = "") -> None:
        super().__init__(message)
        self.extra = extra


class CorruptStateError(ConfigError):
    """A file of the state dir does not match the hash (or length) the database recorded for it."""

    code = "DATA_LOSS"


class StorageError(FedortError):
    """The coordinator could not write its state (disk or quota full): retryable once space returns."""

    code = "UNAVAILABLE"
    detail: str  # what the disk or the library said, when the error was recognised from another one


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


class UploadOffsetError(ProtocolError):
    """A resumable upload's part (or commit) that does not continue where the upload stands."""

    code = "FAILED_PRECONDITION"


class CapabilityError(ProtocolError):
    """A device that cannot do what this run requires (secure aggregation, a codec, error feedback)."""

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


class CertificateError(UnavailableError):
    """TLS certificate verification failed: gRPC says UNAVAILABLE, but waiting cannot heal it."""


__all__ = [
    "FedortError",
    "ConfigError",
    "CorruptStateError",
    "StorageError",
    "DataError",
    "VectorError",
    "ArtifactError",
    "TrainingError",
    "ProtocolError",
    "StaleRoundError",
    "TooStaleError",
    "WrongModelError",
    "UploadOffsetError",
    "CapabilityError",
    "NotFoundError",
    "UnauthenticatedError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "UnavailableError",
    "CertificateError",
]
