"""`WebGate`: what an HTTP call to the web port may cost before anyone knows who is calling.

The web port's counterpart of `call_gate.CallGate`, an ASGI middleware in front of connect-python, which
would otherwise read a whole request body into memory before it checks its size or its token:

| call (token auth) | what happens before the body is read |
| --- | --- |
| `Authorization` with a token that does not verify | UNAUTHENTICATED |
| no token, any method but Join | UNAUTHENTICATED |
| no token, Join | one of `unauthenticated_calls` slots, else RESOURCE_EXHAUSTED |
| a declared body (Content-Length) over the method's limit | RESOURCE_EXHAUSTED |
| a body that grows past the method's limit as it arrives (chunked) | reading stops; the call ends RESOURCE_EXHAUSTED |

The limit is `call_gate.message_limit` (small methods 256 KiB; uploads and secure-aggregation steps the
server's message limit) plus a few bytes of framing. Refusals answer in the caller's protocol: Connect's JSON
error with its HTTP status, or gRPC-Web's trailers-only reply.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from fedort.common.errors import ResourceExhaustedError, UnauthenticatedError
from fedort.coordinator.rpc.auth import Authenticator
from fedort.coordinator.rpc.call_gate import TokenlessJoins, message_limit, needs_token

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

SERVICE_PATH = "/fedort.v1.Coordinator/"
FRAMING_BYTES = 64  # an envelope's 5-byte prefix, gRPC-Web's trailer frame
_HTTP_STATUS = {"unauthenticated": 401, "resource_exhausted": 429}


class WebGate:
    """ASGI middleware: token, unauthenticated slots and body size checked before the body reaches `app`."""

    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        auth: Authenticator,
        server_limit: int,
        unauthenticated_calls: int,
        on_refused: Callable[[str, Exception], None] = lambda method, error: None,
    ) -> None:
        self.app = app
        self.auth = auth
        self.server_limit = server_limit
        self.tokenless = TokenlessJoins(unauthenticated_calls)
        self.on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(SERVICE_PATH) or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        method = scope["path"][len(SERVICE_PATH) :]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        grpc_web = headers.get("content-type", "").startswith("application/grpc-web")
        limit = message_limit(method, self.server_limit) + FRAMING_BYTES
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await self._refuse(
                send,
                method,
                grpc_web,
                ResourceExhaustedError(
                    f"{method} takes requests of at most {limit} bytes, got Content-Length {declared}"
                ),
            )
            return
        slotted = False
        if not self.auth.open:
            token = headers.get("authorization")
            if needs_token(method, token is not None):
                try:
                    self.auth.identify((("authorization", token),) if token is not None else ())
                except UnauthenticatedError as e:
                    await self._refuse(send, method, grpc_web, e)
                    return
            else:
                try:
                    self.tokenless.enter()
                except ResourceExhaustedError as busy:
                    await self._refuse(send, method, grpc_web, busy)
                    return
                slotted = True
        received = 0

        async def bounded_receive() -> MutableMapping[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:  # connect-python answers a ConnectError raised here in the caller's protocol
                    error = ResourceExhaustedError(
                        f"{method} takes requests of at most {limit} bytes; the body grew past it"
                    )
                    self.on_refused(method, error)
                    raise ConnectError(Code.RESOURCE_EXHAUSTED, str(error))
            return message

        try:
            await self.app(scope, bounded_receive, send)
        finally:
            if slotted:
                self.tokenless.leave()

    async def _refuse(self, send: Send, method: str, grpc_web: bool, error: Exception) -> None:
        self.on_refused(method, error)
        code = "unauthenticated" if isinstance(error, UnauthenticatedError) else "resource_exhausted"
        message = str(error)
        if grpc_web:  # a trailers-only reply: the status travels in the headers
            grpc_code = b"16" if code == "unauthenticated" else b"8"
            headers = [
                (b"content-type", b"application/grpc-web+proto"),
                (b"grpc-status", grpc_code),
                (b"grpc-message", message.encode("utf-8", "replace")),
                (b"content-length", b"0"),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        body = json.dumps({"code": code, "message": message}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": _HTTP_STATUS[code], "headers": headers})
        await send({"type": "http.response.body", "body": body})


__all__ = ["WebGate"]
