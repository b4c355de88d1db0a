"""A TCP proxy on 127.0.0.1 that can cut its connections mid-transfer: a dropped mobile link, for real.

`await CutProxy.start(port)` forwards to 127.0.0.1:port; `cut_after(n)` closes every open connection
once n more bytes went from the client to the server (later connections pass again).
"""

from __future__ import annotations

import asyncio


class CutProxy:
    def __init__(self, target: int) -> None:
        self.target = target
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._cut_in: int | None = None
        self.cuts = 0

    @classmethod
    async def start(cls, target: int) -> "CutProxy":
        proxy = cls(target)
        proxy._server = await asyncio.start_server(proxy._serve, "127.0.0.1", 0)
        proxy.port = proxy._server.sockets[0].getsockname()[1]
        return proxy

    def cut_after(self, n: int) -> None:
        self._cut_in = n

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer, upstream=True), self._pipe(up_reader, writer, upstream=False),
                             return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: bool) -> None:
        try:
            while data := await reader.read(16384):
                if upstream and self._cut_in is not None:
                    if len(data) >= self._cut_in:
                        writer.write(data[:self._cut_in])
                        self._cut_in = None
                        self.cuts += 1
                        self._abort()
                        return
                    self._cut_in -= len(data)
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()
            self._writers.discard(writer)

    def _abort(self) -> None:
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        self._abort()
        self._server.close()
        await self._server.wait_closed()
