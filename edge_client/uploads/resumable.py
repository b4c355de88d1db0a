"""Sending an update as a resumable upload (protocol 1.7): Begin, parts at the acknowledged offset, Commit.

One `ResumableSender` per update, called once per attempt by the client's retry loop: after an
UNAVAILABLE mid-upload the next attempt begins the same update again, which the coordinator answers
with the open upload's offset, so only the part that was cut is sent twice. A part refused for its
offset (FAILED_PRECONDITION) asks GetUpload where to continue; an upload that expired (NOT_FOUND)
begins again from 0. A coordinator before 1.7 answers UNIMPLEMENTED: the update streams as before.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Protocol

import numpy as np

from fedort.common.errors import FedortError
from fedort.protos.messages import SubmitResult, UpdateHeader, UploadState

log = logging.getLogger(__name__)


class UploadCalls(Protocol):
    """The calls a resumable upload makes: a `Transport` has them (`transport.update_upload` makes them)."""

    def submit_update(self, header: UpdateHeader, vector: np.ndarray | bytes) -> SubmitResult: ...
    def begin_upload(self, header: UpdateHeader) -> UploadState: ...
    def put_upload_part(
        self, client_id: str, upload_id: str, offset: int, data: bytes, sha256: bytes
    ) -> UploadState: ...
    def get_upload(self, client_id: str, upload_id: str) -> UploadState: ...
    def commit_upload(self, client_id: str, upload_id: str) -> SubmitResult: ...


class ResumableSender:
    """`send()` uploads `body` under `header` resumably; `bytes_sent` counts every payload byte put."""

    def __init__(self, transport: UploadCalls, header: UpdateHeader, body: np.ndarray | bytes, part_bytes: int) -> None:
        self.transport = transport
        self.header = header
        self.payload = memoryview(body.tobytes() if isinstance(body, np.ndarray) else bytes(body))
        self.part_bytes = part_bytes
        self.bytes_sent = 0
        self.streamed = False

    def send(self) -> SubmitResult:
        """One attempt: resume (or begin) the upload, put the rest, commit. Retryable errors propagate."""
        if self.streamed:
            return self.transport.submit_update(self.header, self.payload.tobytes())
        try:
            state = self.transport.begin_upload(self.header)
        except FedortError as e:
            if getattr(e, "code", None) != "UNIMPLEMENTED":
                raise
            log.info("coordinator has no resumable uploads (protocol < 1.7): streaming the update")
            self.streamed = True
            return self.transport.submit_update(self.header, self.payload.tobytes())
        while state.offset < state.payload_bytes:
            state = self._put(state)
        return self.transport.commit_upload(self.header.client_id, state.upload_id)

    def _put(self, state: UploadState) -> UploadState:
        end = min(state.offset + min(self.part_bytes, state.max_part_bytes), len(self.payload))
        data = self.payload[state.offset : end]
        self.bytes_sent += len(data)
        try:
            return self.transport.put_upload_part(
                self.header.client_id, state.upload_id, state.offset, bytes(data), hashlib.sha256(data).digest()
            )
        except FedortError as e:
            code = getattr(e, "code", None)
            if code == "FAILED_PRECONDITION":  # not where the upload stands: ask (NOT_FOUND if it is gone)
                try:
                    return self.transport.get_upload(self.header.client_id, state.upload_id)
                except FedortError as gone:
                    if getattr(gone, "code", None) != "NOT_FOUND":
                        raise
                    return self.transport.begin_upload(self.header)  # its round closed meanwhile: Begin says so
            if code == "NOT_FOUND":  # expired: begin again from 0
                return self.transport.begin_upload(self.header)
            raise


__all__ = ["ResumableSender", "UploadCalls"]
