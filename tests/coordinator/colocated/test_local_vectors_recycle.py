"""Recycled update files on the co-located vector path (coordinator.local_vectors.recycle, edge_client.local_vectors).

A committed round's spool files go to the local vector dir's `.free/` (bounded) instead of being
deleted; a co-located device claims one by renaming it and overwrites it in place. Whatever the
recycled file held before (another size, other values), the coordinator takes exactly the bytes
the device wrote, with the same checks, and the run's vectors are bit-identical to a streamed run.
"""

from __future__ import annotations

import numpy as np
import pytest

from coordinator_fixtures import P_MLP, make_config, mlp_artifacts  # noqa: F401 (fixture)
from fedort.coordinator.colocated import local_vectors as coordinator_side
from fedort.coordinator.colocated.local_vectors import LocalVectorDir
from fedort.edge_client import EdgeClient, EdgeConfig
from fedort.simulations import LocalCoordinator


def data(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(16, 64)).astype(np.float32), "labels": rng.integers(0, 10, 16).astype(np.int64)}


def run(mlp_artifacts, tmp_path, name: str, local: bool, stale: bytes | None = None, rounds: int = 2):
    state = tmp_path / name
    config = make_config(mlp_artifacts, state, rounds=rounds, min_clients=1)
    with LocalCoordinator(config, local_vectors=local) as coordinator:
        if stale is not None:     # what an earlier run (another model size, other values) left to recycle
            free = state / "local-vectors" / ".free"
            free.mkdir()
            (free / "old.f32").write_bytes(stale)
        summary = EdgeClient(EdgeConfig(coordinator=coordinator.address, name="c0", client_id="c0", insecure=True,
                                        cache_dir=tmp_path / f"cache-{name}", heartbeats=False,
                                        persist_identity=False), data=data(0)).run()
        assert coordinator.wait(timeout=60).rounds_completed == rounds
    assert [r.outcome for r in summary.reports] == ["accepted"] * rounds
    return state


@pytest.mark.slow
def test_a_device_overwrites_a_recycled_file_and_the_run_matches_a_streamed_one_bit_for_bit(mlp_artifacts, tmp_path):
    stale = np.full(P_MLP + 1000, 3.0, dtype=np.float32).tobytes()     # longer than an update, other values
    recycled = run(mlp_artifacts, tmp_path, "recycled", local=True, stale=stale)
    streamed = run(mlp_artifacts, tmp_path, "streamed", local=False)
    assert not (recycled / "local-vectors" / ".free" / "old.f32").exists()       # claimed by the device
    assert list((recycled / "local-vectors" / ".free").iterdir()) == []          # cleared when the coordinator closed
    final = "vectors/round-0003.f32"
    assert (recycled / final).read_bytes() == (streamed / final).read_bytes()


def test_committed_spool_files_are_recycled_up_to_the_bound_and_the_rest_is_left_to_delete(tmp_path, monkeypatch):
    monkeypatch.setattr(coordinator_side, "KEEP_FREE", 3)
    lv = LocalVectorDir.open(tmp_path / "lv", tmp_path)
    spool = tmp_path / "spool"
    spool.mkdir()
    files = [spool / f"c{i}.f32" for i in range(5)] + [spool / ".c9.1.1.tmp"]
    for f in files:
        f.write_bytes(b"\0" * 64)
    left = lv.recycle(files)
    assert left == files[3:]                                                  # 3 kept; a temp file is never recycled
    assert len(list((tmp_path / "lv" / ".free").iterdir())) == 3
    assert lv.recycle([spool / "c3.f32"]) == [spool / "c3.f32"]              # full: the caller deletes it


def test_a_coordinator_start_clears_recycled_files_left_by_an_earlier_run(tmp_path):
    (tmp_path / "lv" / ".free").mkdir(parents=True)
    (tmp_path / "lv" / ".free" / "1-0.f32").write_bytes(b"\0" * 64)
    LocalVectorDir.open(tmp_path / "lv", tmp_path)
    assert list((tmp_path / "lv" / ".free").iterdir()) == []


def test_recycling_is_bounded_by_bytes_too(tmp_path, monkeypatch):
    monkeypatch.setattr(coordinator_side, "KEEP_FREE_BYTES", 100)
    lv = LocalVectorDir.open(tmp_path / "lv", tmp_path)
    files = [tmp_path / f"c{i}.f32" for i in range(3)]
    for f in files:
        f.write_bytes(b"\0" * 40)
    assert lv.recycle(files) == files[2:]
