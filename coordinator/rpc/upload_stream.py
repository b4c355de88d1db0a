"""`UploadStream`: the messages of one SubmitUpdate call, read with an idle deadline and one read ahead.

The stream is an UpdateHeader, then chunks. `header` reads the first message and refuses anything
else; `chunks` hands on each chunk's bytes (a plain chunk message arrives as a memoryview of its
payload, `protos.update_part`), refuses a second header, drops a peer silent for
`stream_idle_timeout_s` and verifies the caller's token again every `TOKEN_RECHECK_S`, so a
revoked device's upload stops while it streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from fedort.common.errors import ProtocolError, ResourceExhaustedError
from fedort.coordinator.rpc.auth import Authenticator
from fedort.coordinator.rpc.malformed import reject_malformed
from fedort.protos.messages import UpdateHeader
from fedort.protos.update_part import part_kind

_timeout = getattr(asyncio, "timeout", None)  # Python >= 3.11
UPLOAD_WINDOW_BYTES = 256 << 10  # the per-stream receive window (server.server_options); see UploadStream.chunks
TOKEN_RECHECK_S = 1.0  # an upload's token is verified again this often: a revoked device's upload stops


def _retrieved(read: asyncio.Future) -> None:
    """A read-ahead whose upload ended first: its outcome is nobody's (no 'exception never retrieved')."""
    if not read.cancelled():
        read.exception()


class UploadStream:
    """Reads upload streams for a servicer: `idle_timeout_s` between messages, tokens checked by `auth`."""

    def __init__(self, idle_timeout_s: float, auth: Authenticator) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.auth = auth

    async def read(self, context: Any) -> Any:
        """The next message of an upload stream, or ResourceExhaustedError if the peer went silent.

        A stalled upload would otherwise hold its upload slot (and memory) until the connection
        dies, and a few stalled peers would block every other client's upload.
        """
        limit = self.idle_timeout_s
        try:
            if _timeout is not None:  # 3.11+: a deadline on this task, not a new task per message (wait_for)
                async with _timeout(limit):
                    return await context.read()
            return await asyncio.wait_for(context.read(), limit)
        except asyncio.TimeoutError:
            raise ResourceExhaustedError(
                f"upload stalled: nothing received for {limit:g} s "
                "(stream_idle_timeout_s); the upload was dropped, send it again"
            ) from None

    async def header(self, context: Any) -> UpdateHeader:
        """The stream's first message as an UpdateHeader; ProtocolError for anything else (or nothing)."""
        first = await self.read(context)
        reject_malformed(first)
        if first is grpc.aio.EOF or part_kind(first) != "header":
            raise ProtocolError(
                "an update stream must start with an UpdateHeader, got "
                + ("an empty stream" if first is grpc.aio.EOF else f"a {part_kind(first)}")
            )
        return UpdateHeader.from_pb(first.header)

    async def chunks(self, context: Any) -> AsyncIterator[bytes]:
        """The chunk bytes of an upload stream after its header (ProtocolError for a second header); a plain
        chunk message arrives as a memoryview of its payload (protos.update_part), anything else parsed.

        A chunk larger than the stream's receive window (UPLOAD_WINDOW_BYTES) is handed on only once the
        next message's read is posted: gRPC opens the window for a message it is asked to read, so the
        device sends the next chunk while this one is hashed and spooled instead of stalling after one
        window's worth (benchmarks/bench_upload_stall.py measures the difference).
        At most one message is read ahead."""
        ahead: asyncio.Future | None = None
        loop = asyncio.get_running_loop()
        checked = loop.time()
        try:
            while True:
                part = await (ahead if ahead is not None else self.read(context))
                ahead = None
                if part is grpc.aio.EOF:
                    return
                if not self.auth.open and loop.time() - checked >= TOKEN_RECHECK_S:  # revoked meanwhile?
                    self.auth.identify(context.invocation_metadata())
                    checked = loop.time()
                if type(part) is not memoryview:
                    reject_malformed(part)
                    if part.WhichOneof("part") != "chunk":
                        raise ProtocolError(
                            "an update stream carries one header, then only chunks; got a second header"
                        )
                    part = part.chunk
                if len(part) > UPLOAD_WINDOW_BYTES:
                    ahead = asyncio.ensure_future(self.read(context))
                    ahead.add_done_callback(_retrieved)
                    await asyncio.sleep(0)  # the read-ahead task's first step posts the read
                yield part
        finally:
            if ahead is not None:
                ahead.cancel()


__all__ = ["TOKEN_RECHECK_S", "UPLOAD_WINDOW_BYTES", "UploadStream"]
