"""A masked upload carries the update digest the coordinator announced (BLAKE3 where both have it), and a
co-located device hands it over as a file like any update of at least `local_file_min_bytes` (smaller ones stream).

Real EdgeClients (real ORT sessions) in threads against `LocalCoordinator` (the co-located vector path
on, as in `fedort simulate`) with `--secagg`; the coordinator's byte counter tells what crossed gRPC,
the submissions table which codec and digest each upload came with.
"""

from __future__ import annotations

import sqlite3
import threading

import numpy as np
import pytest

from coordinator_fixtures import P_MLP, make_config, mlp_artifacts  # noqa: F401 (fixture)
from fedort.edge_client import EdgeClient, EdgeConfig
from fedort.common import digests
from fedort.common.secagg.pack import payload_size
from fedort.simulations import LocalCoordinator


def data(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(16, 64)).astype(np.float32), "labels": rng.integers(0, 10, 16).astype(np.int64)}


def run_cohort(coordinator: LocalCoordinator, tmp_path, n: int, local_file_min_bytes: int = 256 * 1024) -> list:
    """n devices at once (every phase waits for the cohort); their summaries."""
    summaries: list = [None] * n

    def run(i: int) -> None:
        client = EdgeClient(EdgeConfig(coordinator=coordinator.address, name=f"c{i}", client_id=f"c{i}",
                                       insecure=True, cache_dir=tmp_path / f"cache-{i}", heartbeats=False,
                                       persist_identity=False, local_file_min_bytes=local_file_min_bytes),
                            data=data(i))
        summaries[i] = client.run()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a device did not finish within 120 s"
    return summaries


def bytes_in(coordinator: LocalCoordinator) -> float:
    return coordinator.coordinator.monitoring.registry.get_sample_value("fedort_bytes_total", {"direction": "in"})


@pytest.mark.slow
def test_small_masked_uploads_stream_with_the_announced_digest_from_co_located_devices(mlp_artifacts, tmp_path):
    config = make_config(mlp_artifacts, tmp_path / "state", rounds=1, min_clients=3, secagg=True, round_timeout_s=60)
    with LocalCoordinator(config) as coordinator:
        summaries = run_cohort(coordinator, tmp_path, 3)
        assert coordinator.wait(timeout=60).rounds_completed == 1
        streamed = bytes_in(coordinator)
    assert [s.reports[0].outcome for s in summaries] == ["accepted"] * 3
    with sqlite3.connect(tmp_path / "state" / "state.db") as db:
        rows = db.execute("SELECT codec, sha256 FROM submissions WHERE round = 1").fetchall()
    assert len(rows) == 3 and all(codec.startswith("secagg-packed:") for codec, _ in rows)
    assert streamed == sum(payload_size(codec, P_MLP) for codec, _ in rows)   # every masked payload crossed gRPC
    if digests.BLAKE3 in digests.available():                          # the digest the coordinator announced
        assert all(sha.startswith("blake3:") for _, sha in rows)


@pytest.mark.slow
def test_co_located_devices_hand_masked_uploads_over_as_files_with_the_announced_digest(mlp_artifacts, tmp_path):
    config = make_config(mlp_artifacts, tmp_path / "state", rounds=1, min_clients=3, secagg=True, round_timeout_s=60)
    with LocalCoordinator(config) as coordinator:
        summaries = run_cohort(coordinator, tmp_path, 3, local_file_min_bytes=0)
        assert coordinator.wait(timeout=60).rounds_completed == 1
        streamed = bytes_in(coordinator)
    assert [s.reports[0].outcome for s in summaries] == ["accepted"] * 3
    assert not streamed                                                   # no masked payload crossed gRPC
    with sqlite3.connect(tmp_path / "state" / "state.db") as db:
        rows = db.execute("SELECT codec, sha256 FROM submissions WHERE round = 1").fetchall()
    assert len(rows) == 3 and all(codec.startswith("secagg-packed:") for codec, _ in rows)
    if digests.BLAKE3 in digests.available():
        assert all(sha.startswith("blake3:") for _, sha in rows)
