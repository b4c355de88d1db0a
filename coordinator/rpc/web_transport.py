"""The web port: the same `fedort.v1.Coordinator` service for browsers, over Connect and gRPC-Web.

    browser ──HTTP/1.1 (TLS)──▶ uvicorn ──▶ CORS ──▶ /fedort.v1.Coordinator/<Method>: connect-python ──▶ WebCoordinator
                                                 └─▶ anything else: the page's static files (`web_page`)
    WebCoordinator.<method>(request, ctx) ──▶ the gRPC port's CoordinatorServicer.<Method>(request, WebContext(ctx))

No rule lives here: each call is handed to the very servicer object the gRPC port serves, through
`WebContext`, which gives it what it reads of a gRPC context (the call's headers as metadata, the
peer, its request stream) and turns its `abort(code, message)` into a `ConnectError` of the same
code. Authentication (`Authorization: Bearer <token>`), identity checks, limits, the error mapping
(`protos.status_codes`) and the Prometheus counters are therefore the gRPC port's own.
connect-python speaks the Connect protocol (JSON and binary protobuf; unary and server streaming
over HTTP/1.1) and gRPC-Web; uvicorn serves it, with the gRPC port's certificate options; Starlette
gives the CORS middleware (allowed origins `web_cors_origins`, none by default: same origin only)
and the static files. The packages are the `fedort[web]` extra; without them `--web-address`
fails with a one-line ConfigError naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import re
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import grpc

from fedort.common.errors import ConfigError
from fedort.common.invariants import present
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.rpc.servicer import CoordinatorServicer
from fedort.protos.stubs import fedort_v1_pb2 as pb

try:
    import uvicorn
    from connectrpc.code import Code
    from connectrpc.errors import ConnectError
    from starlette.middleware.cors import CORSMiddleware
    from starlette.staticfiles import StaticFiles

    from fedort.coordinator.rpc.web_gate import WebGate  # imports connectrpc too
    from fedort.protos.stubs.fedort_v1_connect import CoordinatorASGIApplication
except ImportError as e:  # pragma: no cover - depends on the environment
    _missing = (e.name or "a package").partition(".")[0]
    raise ConfigError(f"--web-address needs the web extra ({_missing} is missing): pip install 'fedort[web]'") from None

if TYPE_CHECKING:
    from fedort.protos.stubs.fedort_v1_connect import Coordinator

log = logging.getLogger(__name__)

SERVICE_PATH = "/fedort.v1.Coordinator/"


def _packaged_page_dir() -> Path | None:
    """`edge_client/web/dist` of this checkout or install, located without importing the device package."""
    spec = importlib.util.find_spec("fedort.edge_client")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "web" / "dist"


#: Request headers a browser may send cross-origin (Connect, gRPC-Web, our auth) and response headers it may read.
ALLOW_HEADERS = [
    "authorization",
    "content-type",
    "connect-protocol-version",
    "connect-timeout-ms",
    "x-grpc-web",
    "x-user-agent",
    "grpc-timeout",
]
EXPOSE_HEADERS = ["grpc-status", "grpc-message", "grpc-status-details-bin", "retry-after"]


def _code(status: grpc.StatusCode) -> Code:
    return Code.CANCELED if status is grpc.StatusCode.CANCELLED else Code[status.name]


class WebContext:
    """What CoordinatorServicer reads of a grpc.aio context, answered from a Connect call."""

    def __init__(self, ctx: Any, requests: AsyncIterator | None = None) -> None:
        self._ctx = ctx
        self._requests = requests

    def invocation_metadata(self) -> list[tuple[str, str]]:
        return [(k.lower(), v) for k, v in self._ctx.request_headers().allitems()]

    def peer(self) -> str:
        """In gRPC's spelling ('ipv4:10.0.0.7:5123'), so both ports share the per-address join budget."""
        address = self._ctx.client_address() or "unknown"
        return f"{'ipv6' if address.count(':') > 1 else 'ipv4'}:{address}"

    def set_trailing_metadata(self, pairs) -> None:
        trailers = self._ctx.response_trailers()
        for key, value in pairs:
            trailers[key] = value

    async def read(self) -> Any:
        """The next message of a client stream (grpc.aio.EOF after the last)."""
        try:
            return await present(self._requests, "the client stream").__anext__()
        except StopAsyncIteration:
            return grpc.aio.EOF

    async def abort(self, code: grpc.StatusCode, message: str) -> None:
        raise ConnectError(_code(code), message)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class WebCoordinator:
    """The Connect service: every method of the .proto, each a call of the gRPC port's servicer."""

    def __init__(self, servicer: CoordinatorServicer) -> None:
        for method in pb.DESCRIPTOR.services_by_name["Coordinator"].methods:
            handler = getattr(servicer, method.name)
            if method.server_streaming:
                parse = getattr(pb, method.output_type.name).FromString
                setattr(self, _snake(method.name), self._server_stream(handler, parse))
            elif method.client_streaming:
                setattr(self, _snake(method.name), self._client_stream(handler))
            else:
                setattr(self, _snake(method.name), self._unary(handler))

    @staticmethod
    def _unary(handler):
        async def call(request, ctx):
            return await handler(request, WebContext(ctx))

        return call

    @staticmethod
    def _server_stream(handler, parse):
        async def call(request, ctx):
            async for item in handler(request, WebContext(ctx)):
                # a download's chunks leave the servicer as wire bytes (malformed.SERIALIZERS): messages here
                yield parse(bytes(item)) if isinstance(item, (bytes, memoryview)) else item

        return call

    @staticmethod
    def _client_stream(handler):
        async def call(requests, ctx):
            return await handler(None, WebContext(ctx, requests.__aiter__()))

        return call


class _Routes:
    """Calls of the service to connect-python, every other path to the page's files (404 without a page)."""

    def __init__(self, connect_app, page: Path | None) -> None:
        self.connect_app = connect_app
        self.page = StaticFiles(directory=page, html=True) if page is not None else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(SERVICE_PATH):
            await self.connect_app(scope, receive, send)
        elif self.page is not None:
            await self.page(scope, receive, send)
        else:
            await _plain(send, 404, b"no page is served here (fedort coordinator serve --web-page DIR)\n")


async def _plain(send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def web_page(config: CoordinatorConfig) -> Path | None:
    """The folder served at `/`: the configured one (which must exist), else the packaged page if built."""
    if config.transport.web_page is not None:
        if not (config.transport.web_page / "index.html").is_file():
            raise ConfigError(f"web_page must be a folder with an index.html, got {config.transport.web_page}")
        return config.transport.web_page
    page = _packaged_page_dir()
    return page if page is not None and (page / "index.html").is_file() else None


def web_app(servicer: CoordinatorServicer, config: CoordinatorConfig):
    """The ASGI application of the web port."""
    limit = 2 * max(config.uploads.max_chunk_bytes, config.transport.download_chunk_bytes) + (
        1 << 20
    )  # as the gRPC port's
    # WebCoordinator sets the service's methods in __init__, from the .proto
    connect_app = CoordinatorASGIApplication(cast("Coordinator", WebCoordinator(servicer)), read_max_bytes=limit)
    origins = list(config.transport.web_cors_origins)
    # token, unauthenticated slots and body sizes checked before connect-python reads a body (web_gate)
    gate = WebGate(
        _Routes(connect_app, web_page(config)),
        servicer.auth,
        limit,
        config.access.unauthenticated_calls,
        servicer.monitor.call_failed,
    )
    return CORSMiddleware(
        gate,
        allow_origins=origins,
        allow_methods=["GET", "POST"],
        allow_headers=ALLOW_HEADERS,
        expose_headers=EXPOSE_HEADERS,
        max_age=600,
    )


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the coordinator's process owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


class WebServer:
    """The web port's server: `start()` binds (ConfigError if it cannot) and serves; `stop()` ends it."""

    def __init__(self, servicer: CoordinatorServicer, config: CoordinatorConfig) -> None:
        self.config = config
        self.app = web_app(servicer, config)
        self.port: int | None = None
        self._server: _Server | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> int:
        cfg = self.config
        address = present(cfg.transport.web_address, "web_address (the web port is started with one)")
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted sockets only then (else every HTTP/1.1 call
        # waits out a delayed ACK between its response's writes)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, int(port)))
        except OSError as e:
            sock.close()
            raise ConfigError(f"cannot serve the web port on {cfg.transport.web_address}: {e.strerror or e}") from None
        tls: dict[str, Any] = (
            {}
            if cfg.transport.tls_cert is None
            else dict(
                ssl_certfile=str(cfg.transport.tls_cert),
                ssl_keyfile=str(cfg.transport.tls_key),
                ssl_ca_certs=str(cfg.transport.tls_client_ca) if cfg.transport.tls_client_ca else None,
                ssl_cert_reqs=ssl.CERT_REQUIRED if cfg.transport.tls_client_ca else ssl.CERT_NONE,
            )
        )
        server = _Server(
            uvicorn.Config(
                self.app, lifespan="off", log_level="warning", access_log=False, timeout_graceful_shutdown=5, **tls
            )
        )
        self._server = server
        self.port = sock.getsockname()[1]
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name="fedort-web-port")
        while not server.started:
            if self._task.done():
                self._task.result()
                raise ConfigError(f"the web port on {cfg.transport.web_address} did not start")
            await asyncio.sleep(0.01)
        log.info(
            "web port serving Connect and gRPC-Web on %s:%d (%s)",
            host,
            self.port,
            "plaintext" if cfg.transport.tls_cert is None else "TLS",
        )
        return self.port

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.should_exit = True
        self._server.force_exit = True  # held long-polls were released by the engine; do not wait for them
        await asyncio.wait({present(self._task, "the web port's task")})
        self._server = None


__all__ = ["WebContext", "WebCoordinator", "WebServer", "web_app"]
