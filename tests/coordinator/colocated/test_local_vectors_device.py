"""edge_client.local_vectors: a device on the coordinator's host passes vectors as files, else streams.

Real EdgeClients (real ORT sessions) against `LocalCoordinator`, which turns the co-located path on
by default (STATE/local-vectors) as `fedort simulate` does; the coordinator's own byte counter
tells whether an update crossed gRPC.
"""

from __future__ import annotations

import numpy as np
import pytest

from coordinator_fixtures import P_MLP, make_config, mlp_artifacts  # noqa: F401 (fixture)
from fedort.edge_client import EdgeClient, EdgeConfig
from fedort.edge_client.uploads.local_vectors import LocalVectors
from fedort.edge_client.transport.grpc_transport import ChannelConfig, Transport
from fedort.edge_client.uploads.update_headers import update_header
from fedort.protos.messages import TaskKind
from fedort.simulations import LocalCoordinator


def data(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(16, 64)).astype(np.float32), "labels": rng.integers(0, 10, 16).astype(np.int64)}


def run_clients(coordinator: LocalCoordinator, tmp_path, n: int = 2, local_file_min_bytes: int = 0) -> list:
    """Run n clients; by default every update is handed over as a file if it can (the MLP's are small)."""
    summaries = []
    for i in range(n):   # one after the other: min_clients=1, each client trains every round it is given
        client = EdgeClient(EdgeConfig(coordinator=coordinator.address, name=f"c{i}", client_id=f"c{i}",
                                       insecure=True, cache_dir=tmp_path / f"cache-{i}", heartbeats=False,
                                       persist_identity=False, local_file_min_bytes=local_file_min_bytes),
                            data=data(i))
        summaries.append(client.run())
    return summaries


def bytes_in(coordinator: LocalCoordinator) -> float:
    return coordinator.coordinator.monitoring.registry.get_sample_value("fedort_bytes_total", {"direction": "in"})


def test_local_coordinator_turns_the_co_located_path_on_unless_told_not_to(mlp_artifacts, tmp_path):
    config = make_config(mlp_artifacts, tmp_path / "state")
    assert LocalCoordinator(config).config.transport.local_vector_dir == tmp_path / "state" / "local-vectors"
    assert LocalCoordinator(config, local_vectors=False).config.transport.local_vector_dir is None


@pytest.mark.slow
def test_a_co_located_client_reads_global_vectors_and_hands_updates_over_as_files(mlp_artifacts, tmp_path):
    config = make_config(mlp_artifacts, tmp_path / "state", rounds=2, min_clients=1)
    with LocalCoordinator(config) as coordinator:
        (summary,) = run_clients(coordinator, tmp_path, n=1)
        assert coordinator.wait(timeout=30).rounds_completed == 2
        assert bytes_in(coordinator) == 0                              # no update crossed gRPC
    assert [r.outcome for r in summary.reports] == ["accepted", "accepted"]
    assert [r.bytes_down for r in summary.reports] == [0, 0]           # nor a global vector
    local = tmp_path / "state" / "local-vectors"
    assert sorted(p.name for p in local.iterdir() if p.name != ".free") == ["global"]  # every update file was taken


@pytest.mark.slow
def test_a_co_located_update_below_local_file_min_bytes_streams_and_the_global_vector_is_still_read(
        mlp_artifacts, tmp_path):
    """The default threshold (256 KiB) is above the MLP's 38 KB update: it streams, and the coordinator
    keeps it inline in its row (one WAL fsync per group, no file fsyncs); the download stays a file read."""
    config = make_config(mlp_artifacts, tmp_path / "state", rounds=2, min_clients=1)
    default = EdgeConfig(coordinator="x:1").local_file_min_bytes
    assert 4 * P_MLP < default
    with LocalCoordinator(config) as coordinator:
        (summary,) = run_clients(coordinator, tmp_path, n=1, local_file_min_bytes=default)
        assert coordinator.wait(timeout=30).rounds_completed == 2
        assert bytes_in(coordinator) == 2 * 4 * P_MLP                  # both updates crossed gRPC
    assert [r.outcome for r in summary.reports] == ["accepted", "accepted"]
    assert [r.bytes_down for r in summary.reports] == [0, 0]           # the global vectors were read from files


@pytest.mark.slow
def test_a_client_that_cannot_see_the_directory_downloads_and_streams(mlp_artifacts, tmp_path):
    config = make_config(mlp_artifacts, tmp_path / "state", rounds=1, min_clients=1)
    with LocalCoordinator(config) as coordinator:
        globals_ = tmp_path / "state" / "local-vectors" / "global"
        for f in globals_.iterdir():          # as for a device on another host: the coordinator's files are not there
            f.unlink()
        (summary,) = run_clients(coordinator, tmp_path, n=1)
        assert coordinator.wait(timeout=30).rounds_completed == 1
        assert bytes_in(coordinator) == 4 * P_MLP                      # the update was streamed
    assert summary.reports[0].outcome == "accepted" and summary.reports[0].bytes_down == 4 * P_MLP


def test_a_refused_file_reference_falls_back_to_streaming_and_turns_the_path_off(mlp_artifacts, tmp_path):
    """A coordinator that does not take files (here: started without the option) refuses the reference
    with INVALID_ARGUMENT; the device streams the same update, and stops trying."""
    config = make_config(mlp_artifacts, tmp_path / "state", rounds=1, min_clients=1)
    with LocalCoordinator(config, local_vectors=False) as coordinator, \
            Transport(ChannelConfig(coordinator.address, insecure=True)) as transport:
        join = transport.join("c0", client_id="c0")
        assert join.local_vector_dir == ""
        task = transport.poll("c0", join.model_id, 5000)
        assert task.kind == TaskKind.FIT
        g = transport.download_vector("c0", join.model_id, task.round)
        shared = tmp_path / "shared"
        (shared / "global").mkdir(parents=True)                        # what a stale announcement left behind
        (shared / "global" / f"{task.vector_sha256.hex()}.f32").write_bytes(g.tobytes())
        local = LocalVectors(shared)
        update = (g + np.float32(0.25)).astype(np.float32)
        header = update_header("c0", join.model_id, task.round, update, 16, {}, 1 << 20, task.vector_sha256)
        reply = local.submit(transport, header, update)
        assert reply.accepted and not local.enabled
        assert bytes_in(coordinator) == 4 * P_MLP
        assert sorted(p.name for p in shared.iterdir() if p.name != ".free") == ["global"]   # its file was removed


@pytest.mark.slow
def test_the_asynchronous_mode_takes_files_too(mlp_artifacts, tmp_path):
    config = make_config(mlp_artifacts, tmp_path / "state", rounds=2, min_clients=1, mode="async", buffer_size=1)
    with LocalCoordinator(config) as coordinator:
        (summary,) = run_clients(coordinator, tmp_path, n=1)
        assert coordinator.wait(timeout=30).rounds_completed == 2
        assert bytes_in(coordinator) == 0
    assert [r.outcome for r in summary.reports] == ["accepted", "accepted"]
