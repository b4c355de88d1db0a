"""`CallGate`: what a call may cost the coordinator before anyone knows who is calling.

A server interceptor that looks at a call's metadata before its first message is read, so a
refused call never has its message buffered or parsed:

| call (token auth) | what happens before the request is read |
| --- | --- |
| `authorization` metadata with a token that does not verify | UNAUTHENTICATED |
| no token, any method but Join | UNAUTHENTICATED |
| no token, Join (the token may travel in `JoinRequest.credential`) | takes one of `unauthenticated_calls` slots, else RESOURCE_EXHAUSTED; the request may be at most `SMALL_MESSAGE_BYTES` (INVALID_ARGUMENT beyond) |
| a token that verifies | served; the servicer checks the identity again against the request |

With open auth every call is served (there is no token to check). Independently of the mode,
every method but the upload, download-request and secure-aggregation ones takes requests of at
most `SMALL_MESSAGE_BYTES` (`message_limit`), checked on the bytes before protobuf parses them.
Memory held by callers without a valid token is thus at most `unauthenticated_calls` × the
server's message limit plus one receive window per refused stream.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from fedort.common.errors import FedortError, ResourceExhaustedError, UnauthenticatedError
from fedort.coordinator.rpc.auth import Authenticator

SERVICE_PREFIX = "/fedort.v1.Coordinator/"
SMALL_MESSAGE_BYTES = 256 << 10  # Join, Heartbeat, PollTask(s), Status, Leave, SubmitEvaluation, download requests
LARGE_METHODS = frozenset(
    {"SubmitUpdate", "PutUploadPart", "SecAgg", "SecAggBatch"}
)  # chunks, upload parts, key and share batches
UNAUTHENTICATED_CALLS = 2


def message_limit(method: str, server_limit: int) -> int:
    """The largest request message `method` accepts (bytes)."""
    return server_limit if method in LARGE_METHODS else min(server_limit, SMALL_MESSAGE_BYTES)


def needs_token(method: str, has_token: bool) -> bool:
    """Whether a call's token is checked before its request is read: all but a token-less Join (whose token
    may travel in `JoinRequest.credential`, read only after a slot is taken)."""
    return has_token or method != "Join"


class TokenlessJoins:
    """The `limit` Join calls without a token that are served at once; both ports take their slots here."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def enter(self) -> None:
        """Take a slot, or ResourceExhaustedError when all are taken."""
        if self.open >= self.limit:
            raise ResourceExhaustedError(
                f"{self.limit} Join calls without a token are already in progress; retry later, or send "
                "'authorization: Bearer <token>'"
            )
        self.open += 1

    def leave(self) -> None:
        self.open -= 1


def _refusal(code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    """A handler that answers without reading the request (a request-streaming handler never reads on its own)."""

    async def refuse(requests, context) -> None:
        await context.abort(code, message)

    return grpc.stream_unary_rpc_method_handler(refuse)


class CallGate(grpc.aio.ServerInterceptor):
    """Token checks and the unauthenticated-call slots, before a call's request is read (see the module docstring)."""

    def __init__(
        self,
        auth: Authenticator,
        unauthenticated_calls: int = UNAUTHENTICATED_CALLS,
        on_refused: Callable[[str, FedortError], None] = lambda method, error: None,
    ) -> None:
        """`on_refused(method, error)` hears of every call refused here (the monitor counts them)."""
        self.auth = auth
        self.tokenless = TokenlessJoins(unauthenticated_calls)
        self.on_refused = on_refused

    async def intercept_service(
        self, continuation: Callable[..., Awaitable[grpc.RpcMethodHandler]], details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        if self.auth.open or not details.method.startswith(SERVICE_PREFIX):
            return await continuation(details)
        metadata = details.invocation_metadata or ()
        method = details.method[len(SERVICE_PREFIX) :]
        has_token = any(key.lower() == "authorization" for key, _ in metadata)
        if needs_token(method, has_token):
            try:
                self.auth.identify(metadata)
            except UnauthenticatedError as e:
                self.on_refused(method, e)
                return _refusal(grpc.StatusCode.UNAUTHENTICATED, str(e))
            return await continuation(details)
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        return grpc.stream_unary_rpc_method_handler(
            self._slotted(method, handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _slotted(self, method: str, serve):
        async def join(requests, context):
            try:
                self.tokenless.enter()
            except ResourceExhaustedError as busy:
                self.on_refused(method, busy)
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(busy))
            try:
                request = None
                async for request in requests:  # noqa: B007 - the first request, read after the loop
                    break
                if request is None:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "Join call ended without a request")
                return await serve(request, context)
            finally:
                self.tokenless.leave()

        return join


__all__ = [
    "CallGate",
    "LARGE_METHODS",
    "SMALL_MESSAGE_BYTES",
    "TokenlessJoins",
    "UNAUTHENTICATED_CALLS",
    "message_limit",
    "needs_token",
]
