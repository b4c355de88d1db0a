"""The calls that carry an update to the coordinator: one SubmitUpdate stream, or a resumable upload's steps.

SubmitUpdate streams the header, then the chunks of the raw vector or of a codec's payload. The resumable
upload (protocol 1.7) is Begin, parts at the acknowledged offset, Get (where does it stand), Commit;
`edge_client.uploads.resumable` decides which step comes next.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from fedort.edge_client.transport._calls import Calls
from fedort.protos.messages import SubmitResult, UpdateHeader, UploadState
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.update_codecs import iter_payload_chunks
from fedort.protos.vector_stream import CHUNK_BYTES, iter_chunks


class UpdateUploads:
    """Typed update-upload calls over `calls` (the names are the Transport's, which hands them on)."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    def submit_update(self, header: UpdateHeader, vector: np.ndarray | bytes) -> SubmitResult:
        """Stream the header then the chunks of the vector (raw) or of a codec payload (bytes);
        returns once the coordinator answered."""
        chunk = header.vector.chunk_size or CHUNK_BYTES

        def parts() -> Iterator[pb.UpdatePart]:
            yield pb.UpdatePart(header=header.to_pb())
            pieces = (
                iter_payload_chunks(vector, chunk)
                if isinstance(vector, (bytes, bytearray))
                else iter_chunks(vector, chunk)
            )
            for c in pieces:
                yield pb.UpdatePart(chunk=c)

        return SubmitResult.from_pb(self._calls.unary("SubmitUpdate", parts(), self._calls.config.stream_timeout_s))

    def begin_upload(self, header: UpdateHeader) -> UploadState:
        req = pb.BeginUploadRequest(header=header.to_pb())
        return UploadState.from_pb(self._calls.unary("BeginUpload", req, self._calls.config.rpc_timeout_s))

    def put_upload_part(self, client_id: str, upload_id: str, offset: int, data: bytes, sha256: bytes) -> UploadState:
        req = pb.UploadPartRequest(client_id=client_id, upload_id=upload_id, offset=offset, data=data, sha256=sha256)
        return UploadState.from_pb(self._calls.unary("PutUploadPart", req, self._calls.config.rpc_timeout_s))

    def get_upload(self, client_id: str, upload_id: str) -> UploadState:
        ref = pb.UploadRef(client_id=client_id, upload_id=upload_id)
        return UploadState.from_pb(self._calls.unary("GetUpload", ref, self._calls.config.rpc_timeout_s))

    def commit_upload(self, client_id: str, upload_id: str) -> SubmitResult:
        ref = pb.UploadRef(client_id=client_id, upload_id=upload_id)
        return SubmitResult.from_pb(self._calls.unary("CommitUpload", ref, self._calls.config.stream_timeout_s))


__all__ = ["UpdateUploads"]
