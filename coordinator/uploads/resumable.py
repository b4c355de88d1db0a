"""Resumable unary uploads (protocol 1.7): SubmitUpdate's update, delivered in parts over unary calls.

    BeginUpload(header) ──▶ the engine's upload intake runs as a task of its own, fed by a PartFeed
    PutUploadPart(offset, data, sha256) ──▶ one chunk into that intake; answered once it is checked and fsynced
    CommitUpload ──▶ the feed ends: the intake finishes (digest, group commit) and answers as SubmitUpdate would

There is no second set of rules: each upload IS one `engine.submit_update` call (admission, upload
slot, whole-upload deadline, the streaming checks of `UpdateReceiver`, the group commit, counted
once), whose chunk stream happens to arrive over several calls. What this module adds is the part
framing (offset, per-part sha256, size), one upload per client at a time, who may touch an upload,
and expiry: an upload untouched for `idle_s` is dropped (its intake cancelled, its slot freed),
checked on every call with an injectable clock. An acknowledged offset is durable (the spool file
is fdatasynced before the answer); the upload itself lives in this process: a coordinator restart
forgets it (NOT_FOUND, the device begins again).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fedort.common import digests
from fedort.common.errors import NotFoundError, PermissionDeniedError, ProtocolError, UploadOffsetError, VectorError
from fedort.coordinator.aggregation import decoder_for
from fedort.coordinator.engine.resubmission import Resubmitted, submit_counted_once
from fedort.coordinator.state.store import now_ms
from fedort.coordinator.uploads.stream import UpdateReceiver
from fedort.protos.messages import SubmitResult, UpdateHeader, UploadState

log = logging.getLogger(__name__)


class PartFeed:
    """The chunk stream one upload's intake reads: each part as PutUploadPart hands it over.

    The intake asks for the next chunk only once it has checked and spooled the previous one, so that
    moment (plus an fdatasync of the spool file, `UpdateReceiver.sync`) acknowledges a part. The upload
    pipeline binds its receiver with `bind_receiver`; a duplicate, which is drained, binds none.
    """

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.started = loop.create_future()  # set at the first read: admission passed, a slot is held
        self.acked = 0  # payload bytes checked and durable
        self._receiver: UpdateReceiver | None = None
        self._next: tuple[bytes, asyncio.Future] | None = None
        self._taken: tuple[int, asyncio.Future] | None = None
        self._wake = asyncio.Event()
        self._closed = False

    def bind_receiver(self, receiver: UpdateReceiver) -> None:
        self._receiver = receiver

    @property
    def in_flight(self) -> asyncio.Future | None:
        """The acknowledgement of the part handed over and not yet acknowledged, if any."""
        part = self._next or self._taken
        return part[1] if part is not None else None

    def put(self, data: bytes) -> asyncio.Future:
        """Hand over one part (only when none is in flight); the future resolves once it is durable."""
        assert self.in_flight is None and not self._closed
        done = asyncio.get_running_loop().create_future()
        self._next = (data, done)
        self._wake.set()
        return done

    def close(self) -> None:
        """No more parts: the intake's next read ends its stream (it then checks completeness and digest)."""
        self._closed = True
        self._wake.set()

    def __aiter__(self) -> PartFeed:
        return self

    async def __anext__(self) -> bytes:
        if not self.started.done():
            self.started.set_result(None)
        if self._taken is not None:  # the intake is done with the previous part: make it durable, then ack it
            n, done = self._taken
            if self._receiver is not None:
                await self._receiver.sync()
            self._taken = None
            self.acked += n
            if not done.done():
                done.set_result(None)
        while self._next is None and not self._closed:
            self._wake.clear()
            await self._wake.wait()
        if self._next is None:
            raise StopAsyncIteration
        (data, done), self._next = self._next, None
        self._taken = (len(data), done)
        return data


@dataclass(eq=False)
class _Upload:
    id: str
    client_id: str
    key: tuple
    payload_bytes: int
    feed: PartFeed
    task: asyncio.Task
    touched: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _key(h: UpdateHeader) -> tuple:
    """What makes two Begins the same update: round, codec, size and the payload digest."""
    v = h.vector
    return (h.vector.round, v.codec or "raw", v.payload_bytes, digests.stored(v.digest, v.sha256))


class ResumableUploads:
    """The coordinator's open resumable uploads, at most one per client. Event-loop only."""

    def __init__(
        self, engine: Resubmitted, idle_s: float, max_part_bytes: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.engine = engine
        self.idle_s = idle_s
        self.max_part_bytes = max_part_bytes
        self.clock = clock
        self._uploads: dict[str, _Upload] = {}
        self._by_client: dict[str, _Upload] = {}

    # ---- calls ------------------------------------------------------------------------------

    async def begin(self, header: UpdateHeader, new_upload: Callable[[], None] = lambda: None) -> UploadState:
        """Admit `header` and open an upload (offset 0), or the same client's open upload of this update.

        `new_upload` runs before a new upload is admitted (the per-client submission rate)."""
        await self._expire()
        if header.local_file:
            raise ProtocolError("a resumable upload carries its payload in parts; local_file must be empty")
        key = _key(header)
        old = self._by_client.get(header.client_id)
        if old is not None and old.key == key and not _failed(old.task):
            self._touch(old)
            return await self._state(old)
        if old is not None:
            await self._drop(old, "replaced by a new upload of the same client")
        new_upload()
        feed = PartFeed()
        task = asyncio.ensure_future(submit_counted_once(self.engine, header, feed))
        task.add_done_callback(_retrieved)
        try:
            await asyncio.wait({feed.started, task}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the caller went away before it was admitted: nobody would own it
            task.cancel()
            raise
        if task.done() and (refused := task.exception()) is not None:
            raise refused  # refused at admission (or the slot): nothing was opened
        payload = self._payload_bytes(header)
        if task.done():  # counted before, after its round closed: nothing left to send
            feed.acked = payload
        up = _Upload(secrets.token_urlsafe(18), header.client_id, key, payload, feed, task, self.clock())
        self._uploads[up.id] = up
        self._by_client[up.client_id] = up
        log.debug("resumable upload %s of %s opened (%d bytes)", up.id, up.client_id, payload)
        return await self._state(up)

    async def put(self, client_id: str, upload_id: str, offset: int, data: bytes, sha256: bytes) -> UploadState:
        """Check one part's framing, then hand it to the intake; answered once it is durable."""
        up = await self._find(client_id, upload_id)
        if not data:
            raise ProtocolError("an upload part must carry 1 or more bytes, got none")
        if len(data) > self.max_part_bytes:
            raise VectorError(
                f"upload part of {len(data)} bytes exceeds max_part_bytes {self.max_part_bytes}; split it"
            )
        if len(sha256) != 32 or hashlib.sha256(data).digest() != sha256:
            raise VectorError(
                f"upload part at offset {offset}: its sha256 does not match its {len(data)} bytes "
                "(expected the 32-byte sha256 of `data`); the part was not taken"
            )
        async with up.lock:
            await self._settle(up)
            if offset != up.feed.acked:
                raise UploadOffsetError(
                    f"upload {upload_id} expects its next part at offset {up.feed.acked}, "
                    f"got offset {offset}; call GetUpload and continue from there"
                )
            if offset + len(data) > up.payload_bytes:
                raise VectorError(
                    f"upload part at offset {offset} of {len(data)} bytes goes beyond the "
                    f"{up.payload_bytes} payload bytes the header declares"
                )
            self._touch(up)
            done = up.feed.put(bytes(data))
            await asyncio.wait({done, up.task}, return_when=asyncio.FIRST_COMPLETED)
            if not done.done():
                self._forget(up)
                _raise_outcome(up)  # the intake failed on this part (or the round closed): its error
            self._touch(up)
            return await self._state(up)

    async def get(self, client_id: str, upload_id: str) -> UploadState:
        up = await self._find(client_id, upload_id)
        async with up.lock:
            await self._settle(up)
            self._touch(up)
            return await self._state(up)

    async def commit(self, client_id: str, upload_id: str) -> SubmitResult:
        """End the upload: the intake checks the whole payload and answers as SubmitUpdate does (repeatable)."""
        up = await self._find(client_id, upload_id)
        async with up.lock:
            await self._settle(up)
            if up.feed.acked != up.payload_bytes:
                raise UploadOffsetError(
                    f"upload {upload_id} has {up.feed.acked} of its {up.payload_bytes} bytes; "
                    f"put the rest from offset {up.feed.acked} before committing"
                )
            self._touch(up)
            up.feed.close()
            await asyncio.wait({up.task})
            if _failed(up.task):
                self._forget(up)
                _raise_outcome(up)
            return up.task.result()

    def close(self) -> None:
        """Cancel every open upload (the coordinator stops)."""
        for up in list(self._uploads.values()):
            up.task.cancel()
            self._forget(up)

    # ---- helpers ------------------------------------------------------------------------------

    async def _find(self, client_id: str, upload_id: str) -> _Upload:
        await self._expire()
        up = self._uploads.get(upload_id)
        if up is None:
            raise NotFoundError(
                f"no open upload {upload_id!r}: it expired (idle {self.idle_s:g} s), was refused, "
                "or the coordinator restarted; begin it again"
            )
        if up.client_id != client_id:
            raise PermissionDeniedError(f"upload {upload_id!r} belongs to another client, not {client_id}")
        return up

    async def _settle(self, up: _Upload) -> None:
        """Wait until no part is between handed over and acknowledged (a call cut off left one in flight)."""
        pending = up.feed.in_flight
        if pending is not None and not up.task.done():
            await asyncio.wait({pending, up.task}, return_when=asyncio.FIRST_COMPLETED)
        if _failed(up.task):
            self._forget(up)
            _raise_outcome(up)

    def _payload_bytes(self, h: UpdateHeader) -> int:
        return decoder_for(h.vector.codec or "raw").payload_bytes(h.vector.length, h.vector.payload_bytes)

    def _touch(self, up: _Upload) -> None:
        up.touched = self.clock()

    async def _state(self, up: _Upload) -> UploadState:
        left = max(0.0, up.touched + self.idle_s - self.clock())
        return UploadState(up.id, up.feed.acked, up.payload_bytes, self.max_part_bytes, now_ms() + int(left * 1000))

    async def _expire(self) -> None:
        """Drop every upload idle longer than idle_s; return once their intakes unwound (slots, temp files)."""
        now = self.clock()
        expired = [u for u in self._uploads.values() if now - u.touched > self.idle_s and not u.lock.locked()]
        for up in expired:
            log.info(
                "resumable upload %s of %s expired after %g s idle at %d of %d bytes",
                up.id,
                up.client_id,
                self.idle_s,
                up.feed.acked,
                up.payload_bytes,
            )
            up.task.cancel()
            self._forget(up)
        if expired:
            await asyncio.wait({u.task for u in expired})

    async def _drop(self, up: _Upload, why: str) -> None:
        log.info("resumable upload %s of %s dropped: %s", up.id, up.client_id, why)
        up.task.cancel()
        self._forget(up)
        await asyncio.wait({up.task})  # its upload slot is free once the intake unwound

    def _forget(self, up: _Upload) -> None:
        self._uploads.pop(up.id, None)
        if self._by_client.get(up.client_id) is up:
            del self._by_client[up.client_id]


def _raise_outcome(up: _Upload) -> None:
    """The error the upload's intake ended with (NotFoundError if it was dropped: replaced or expired)."""
    if up.task.cancelled():
        raise NotFoundError(f"upload {up.id!r} was dropped (replaced by another upload of {up.client_id}, or expired)")
    up.task.result()


def _failed(task: asyncio.Task) -> bool:
    return task.done() and (task.cancelled() or task.exception() is not None)


def _retrieved(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()


__all__ = ["PartFeed", "ResumableUploads"]
