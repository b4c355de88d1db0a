"""Request bytes that do not parse as the expected message: answered INVALID_ARGUMENT, not UNKNOWN.

grpc parses every request with the handler's deserializer before our code runs. A DecodeError
there ends a unary call with UNKNOWN and makes `context.read()` of a stream raise (INTERNAL),
both logged as server faults, although it is the peer that broke the wire contract.
`add_servicer` registers the generated Coordinator handlers with a deserializer that turns
unparseable bytes into a `Malformed` marker; the servicer's error boundary rejects it with
ProtocolError (INVALID_ARGUMENT) like any other bad input. SubmitUpdate's deserializer hands a
plain chunk message over as a memoryview of its payload (`protos.update_part`), protobuf parses the rest;
DownloadVector's serializer sends a chunk the servicer already encoded (bytes) as it is. A request
over its method's limit (`call_gate.message_limit`) is marked without being parsed and refused the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from fedort.common.errors import ProtocolError
from fedort.coordinator.rpc.call_gate import LARGE_METHODS, message_limit
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc
from fedort.protos.update_part import parse_update_part, serialize_part

SERVICE_NAME = "fedort.v1.Coordinator"
DESERIALIZERS = {"SubmitUpdate": parse_update_part}  # an upload's chunks: the payload without protobuf's copy
SERIALIZERS = {"DownloadVector": serialize_part}  # a download's chunks: wire bytes made without protobuf


@dataclass(frozen=True)
class Malformed:
    """Stands in for a request message whose bytes did not parse."""

    error: str
    oversized: bool = False


def reject_malformed(request: Any) -> None:
    """Raise ProtocolError (INVALID_ARGUMENT) if `request` is a `Malformed` marker."""
    if isinstance(request, Malformed):
        if request.oversized:
            raise ProtocolError(request.error)
        raise ProtocolError(f"request is not a valid protobuf message: {request.error}")


def tolerant(deserialize: Callable[[bytes], Any], limit: int | None = None, method: str = "") -> Callable[[bytes], Any]:
    """`deserialize` that marks unparseable bytes, and requests over `limit` bytes unparsed, as `Malformed`."""

    def parse(data: bytes) -> Any:
        if limit is not None and len(data) > limit:
            return Malformed(
                f"{method} requests must be at most {limit} bytes, got {len(data)} (unparsed)", oversized=True
            )
        try:
            return deserialize(data)
        except DecodeError as e:
            return Malformed(str(e))

    return parse


class _Capture:
    """Collects the handlers the generated `add_CoordinatorServicer_to_server` registers.

    Stubs of grpcio-tools >= 1.63 register them with `add_registered_method_handlers`, older ones
    only through a generic handler, which is asked (public API: `service(details)`) for each
    method the .proto declares.
    """

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, generic_handlers) -> None:
        for generic in generic_handlers:
            for method in pb.DESCRIPTOR.services_by_name["Coordinator"].methods:
                handler = generic.service(_Details(f"/{SERVICE_NAME}/{method.name}"))
                if handler is not None:
                    self.handlers.setdefault(method.name, handler)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.handlers.update(handlers)


@dataclass(frozen=True)
class _Details:
    method: str
    invocation_metadata: tuple = ()


def add_servicer(
    servicer: pb_grpc.CoordinatorServicer, server: grpc.aio.Server, server_limit: int | None = None
) -> None:
    """`pb_grpc.add_CoordinatorServicer_to_server`, with garbage-tolerant request deserializers that refuse
    requests over the method's `call_gate.message_limit` (when `server_limit` is given)."""
    capture = _Capture()
    pb_grpc.add_CoordinatorServicer_to_server(servicer, capture)
    handlers = {
        name: h._replace(
            request_deserializer=tolerant(
                DESERIALIZERS.get(name, h.request_deserializer),
                None if server_limit is None or name in LARGE_METHODS else message_limit(name, server_limit),
                name,
            ),
            response_serializer=SERIALIZERS.get(name, h.response_serializer),
        )
        for name, h in capture.handlers.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    if hasattr(server, "add_registered_method_handlers"):  # grpcio >= 1.63: faster dispatch
        server.add_registered_method_handlers(SERVICE_NAME, handlers)
