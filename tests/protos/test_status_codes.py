"""protos.status_codes: the one mapping between the error tree and gRPC status codes."""

from __future__ import annotations

import subprocess
import sys

import grpc
import pytest

from fedort.common import errors
from fedort.protos.status_codes import from_rpc_error, status_for


def test_the_error_tree_imports_without_grpc():
    code = "import sys; import fedort.common.errors; assert 'grpc' not in sys.modules, 'grpc was imported'"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("cls", [getattr(errors, n) for n in errors.__all__])
def test_every_error_names_a_real_status_code(cls):
    assert isinstance(cls.code, str) and hasattr(grpc.StatusCode, cls.code)


@pytest.mark.parametrize("exc, code", [
    (errors.DataError("bad labels"), grpc.StatusCode.INVALID_ARGUMENT),
    (errors.StaleRoundError("round 3 closed"), grpc.StatusCode.FAILED_PRECONDITION),
    (errors.ResourceExhaustedError("too big"), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (ValueError("oops"), grpc.StatusCode.INTERNAL),
])
def test_a_server_answers_with_the_code_of_the_class(exc, code):
    assert status_for(exc)[0] == code


class _RpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize("code, cls", [
    (grpc.StatusCode.NOT_FOUND, errors.NotFoundError),
    (grpc.StatusCode.FAILED_PRECONDITION, errors.StaleRoundError),
    (grpc.StatusCode.UNAVAILABLE, errors.UnavailableError),
    (grpc.StatusCode.DEADLINE_EXCEEDED, errors.FedortError),
])
def test_a_client_gets_the_class_and_code_name_back_with_the_message(code, cls):
    exc = from_rpc_error(_RpcError(code, "unknown client c-1"))
    assert type(exc) is cls and exc.code == code.name and str(exc) == f"{code.name}: unknown client c-1"


def test_a_round_trip_keeps_the_code():
    code, message = status_for(errors.PermissionDeniedError("not yours"))
    back = from_rpc_error(_RpcError(code, message))
    assert isinstance(back, errors.PermissionDeniedError) and back.code == "PERMISSION_DENIED"
