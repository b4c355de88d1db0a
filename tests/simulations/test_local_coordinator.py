"""fedort.simulations.LocalCoordinator: the public handle a benchmark or notebook drives a local run with."""

from __future__ import annotations

import numpy as np
import pytest

from fedort.edge_client import EdgeClient, EdgeConfig
from fedort.common.round_state import RoundState
from fedort.simulations import LocalCoordinator
from coordinator_fixtures import make_config, mlp_artifacts  # noqa: F401


@pytest.mark.slow
def test_a_local_coordinator_serves_a_run_and_reports_its_outcome_and_timeline(mlp_artifacts, tmp_path):
    config = make_config(mlp_artifacts, tmp_path / "state", rounds=1, min_clients=1)
    rng = np.random.default_rng(0)
    data = {"x": rng.normal(size=(8, 64)).astype(np.float32), "labels": rng.integers(0, 10, 8).astype(np.int64)}
    with LocalCoordinator(config) as coordinator:
        client = EdgeClient(EdgeConfig(coordinator=coordinator.address, name="c0", client_id="c0", insecure=True,
                                       cache_dir=tmp_path / "cache", heartbeats=False, persist_identity=False),
                            data=data)
        assert client.run().outcome == "done"
        outcome = coordinator.wait(timeout=30)
    assert outcome.state is RoundState.DONE and outcome.rounds_completed == 1
    assert [t.to_state for t in coordinator.timeline()] == ["TRAINING", "AGGREGATING", "EXPORTING", "DONE"]
