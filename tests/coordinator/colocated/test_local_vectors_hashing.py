"""Who hashes a co-located update (protocol 1.6): the coordinator, from the bytes it takes, on a first attempt.

A coordinator with a local vector dir says so in its JoinReply (`hashes_local_files`); a device's first
attempt then names its file with the digest value left empty, the coordinator records the digest of the
bytes it read (and folded), and a resend after a lost answer carries the digest, as every streamed update
does. Coordinator side: a real coordinator on 127.0.0.1:0. Device side: a real gRPC peer that records
what arrives and loses the first answer.
"""

from __future__ import annotations

import hashlib
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest

from coordinator_fixtures import (mlp_artifacts, nothing_changed, opened_round,  # noqa: F401 (fixtures)
                                  start_coordinator, stub_client, update_header)
from fedort.edge_client.uploads.local_vectors import LocalVectors
from fedort.edge_client.transport.retry import Backoff, call_with_retry
from fedort.edge_client.transport.grpc_transport import ChannelConfig, Transport
from fedort.edge_client.uploads.update_codec import EncodedUpdate
from fedort.common import digests
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.stubs import fedort_v1_pb2_grpc as pb_grpc


def write(path: Path, vector: np.ndarray) -> Path:
    path.write_bytes(np.ascontiguousarray(vector, dtype="<f4").tobytes())
    return path


async def test_the_join_reply_says_the_coordinator_hashes_files_only_with_a_local_vector_dir(
        start_coordinator, stub_client, tmp_path):
    with_dir = await start_coordinator(min_clients=1, rounds=1, local_vector_dir=tmp_path / "lv")
    assert (await stub_client(with_dir.port).join("client-a")).hashes_local_files
    without = await start_coordinator(min_clients=1, rounds=1, state_dir=tmp_path / "other")
    assert not (await stub_client(without.port).join("client-a")).hashes_local_files


async def test_a_file_without_a_digest_value_is_taken_and_its_row_records_the_digest_of_its_bytes(
        start_coordinator, stub_client, tmp_path):
    coord, client, model, round, g, local = await opened_round(start_coordinator, stub_client,
                                                               local_vector_dir=tmp_path / "lv")
    update = (g + np.float32(0.25)).astype(np.float32)
    write(local / "client-a.first.f32", update)
    header = update_header("client-a", model, round, update, 10, sha256=b"")
    header.local_file = "client-a.first.f32"
    assert (await client.submit_parts([pb.UpdatePart(header=header)])).accepted
    assert coord.engine.store.submission_digest(round, "client-a") == hashlib.sha256(update.tobytes()).hexdigest()
    assert not (local / "client-a.first.f32").exists()                     # moved into the spool


async def test_a_streamed_update_without_a_digest_value_is_refused_and_nothing_counts(
        start_coordinator, stub_client, tmp_path):
    coord, client, model, round, g, _ = await opened_round(start_coordinator, stub_client,
                                                           local_vector_dir=tmp_path / "lv")
    header = update_header("client-a", model, round, g, 10, sha256=b"")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.submit_parts([pb.UpdatePart(header=header), pb.UpdatePart(chunk=g.tobytes())])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "only an update handed over as a local_file may leave it empty" in e.value.details()
    nothing_changed(coord, round)


class _LosesFirstAnswer(pb_grpc.CoordinatorServicer):
    """A peer that records each SubmitUpdate header and the named file's bytes, and loses the first answer."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.seen = directory, []

    def SubmitUpdate(self, request_iterator, context):
        header = next(iter(request_iterator)).header
        self.seen.append((bytes(header.vector.sha256), (self.directory / header.local_file).read_bytes()))
        if len(self.seen) == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the answer was lost")
        return pb.SubmitReply(accepted=True, round=header.vector.round)


@pytest.fixture
def peer(tmp_path):
    directory = tmp_path / "lv"
    (directory / "global").mkdir(parents=True)
    servicer = _LosesFirstAnswer(directory)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_CoordinatorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    transport = Transport(ChannelConfig(f"127.0.0.1:{port}", insecure=True, rpc_timeout_s=10.0))
    try:
        yield servicer, transport, directory
    finally:
        transport.close()
        server.stop(grace=None).wait(10)


def _update_of(directory: Path) -> tuple[pb.UpdateHeader, np.ndarray]:
    """A raw update whose global vector the directory publishes (so the device hands it over as a file)."""
    g = np.linspace(-1, 1, 1000, dtype=np.float32)
    sha = hashlib.sha256(g.tobytes()).digest()
    write(directory / "global" / f"{sha.hex()}.f32", g)
    update = EncodedUpdate("raw", vector=g + np.float32(0.5), trained_from=sha, length=g.size)
    return update.stream("client-a", "m", 1, 10, {}, 1 << 20, (digests.BLAKE3,), digested=False)


@pytest.mark.parametrize("coordinator_hashes", [True, False])
def test_only_a_first_attempt_to_a_hashing_coordinator_goes_without_its_digest(peer, coordinator_hashes):
    servicer, transport, directory = peer
    header, body = _update_of(directory)
    send = LocalVectors(directory).sender(transport, header, body, coordinator_hashes)
    assert call_with_retry(send, Backoff(initial_s=0.01, max_delay_s=0.02, give_up_after_s=10), what="SubmitUpdate").accepted
    digest = digests.digest(digests.BLAKE3, body.tobytes())
    assert [d for d, _ in servicer.seen] == [b"" if coordinator_hashes else digest, digest]
    assert [data for _, data in servicer.seen] == [body.tobytes()] * 2      # each attempt wrote the whole update
