"""A round's global vector on the device: from the cache, from the co-located coordinator's folder, or downloaded.

The cache answers first when the Task names a digest it holds. A device on the coordinator's host reads the
vector from its folder (`uploads.local_vectors`); any other downloads it, offering the latest cached vector
as the base of a delta. Whatever arrives is checked finite before it is cached or trained on.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedort.common.errors import ProtocolError
from fedort.edge_client.client.cache import ArtifactCache
from fedort.edge_client.client.calls import ClientCalls
from fedort.edge_client.client.joining import Membership
from fedort.edge_client.training.guards import check_finite
from fedort.edge_client.transport.grpc_transport import Transport
from fedort.protos.messages import Task
from fedort.protos.vector_stream import vector_digest


def fetch_global(
    task: Task,
    member: Membership,
    cache: ArtifactCache,
    calls: ClientCalls,
    transport: Transport,
    on_phase: Callable[[str], None],
) -> tuple[np.ndarray, bool, int]:
    """(vector, whether it came from the cache, bytes downloaded) for `task`'s round; the phase is
    "downloading" unless the cache had it."""
    length = member.manifest.parameter_count
    if task.vector_length and task.vector_length != length:
        raise ProtocolError(f"round {task.round} vector has {task.vector_length} elements, the model {length}")
    if task.vector_sha256:
        cached = cache.get_vector(task.vector_sha256, length)
        if cached is not None:
            return cached, True, 0
    on_phase("downloading")
    local = (
        member.local.read_global(task.vector_sha256, length, task.vector_blake3) if member.local is not None else None
    )
    if local is not None:  # co-located with the coordinator: read, not downloaded
        vector, received = local, 0
    else:
        base = cache.latest_vector()  # the coordinator may send the delta against it
        vector, received = calls(
            f"DownloadVector round {task.round}",
            lambda: transport.download_global(
                member.client_id,
                member.model_id,
                task.round,
                expected_length=length,
                expected_sha256=task.vector_sha256 or None,
                expected_blake3=task.vector_blake3 or None,
                base=base if base and len(base[1]) == length else None,
            ),
        )
    check_finite(vector, task.round)  # before caching: a poisoned vector must not be trained on or kept
    cache.put_vector(task.vector_sha256 or vector_digest(vector), vector, persist=local is None)
    return vector, False, received


__all__ = ["fetch_global"]
