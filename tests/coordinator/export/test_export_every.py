"""export_every: a simulation may write the inference model every N rounds (and after the last)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedort.coordinator import CoordinatorConfig
from fedort.coordinator.state.layout import StateLayout
from fedort.edge_client import EdgeClient, EdgeConfig
from fedort.common.errors import ConfigError
from fedort.common.round_state import RoundState
from fedort.simulations import LocalCoordinator
from coordinator_fixtures import make_config, mlp_artifacts  # noqa: F401


def run(config, tmp_path):
    rng = np.random.default_rng(0)
    data = {"x": rng.normal(size=(8, 64)).astype(np.float32), "labels": rng.integers(0, 10, 8).astype(np.int64)}
    with LocalCoordinator(config) as coordinator:
        client = EdgeClient(EdgeConfig(coordinator=coordinator.address, name="c0", client_id="c0", insecure=True,
                                       cache_dir=tmp_path / "cache", heartbeats=False, persist_identity=False),
                            data=data)
        assert client.run().outcome == "done"
        return coordinator.wait(timeout=60)


@pytest.mark.slow
def test_models_are_written_every_n_rounds_and_after_the_last_and_every_round_keeps_its_record(mlp_artifacts, tmp_path):
    config = make_config(mlp_artifacts, tmp_path / "state", rounds=5, min_clients=1, export_every=2)
    outcome = run(config, tmp_path)
    assert outcome.state is RoundState.DONE and outcome.rounds_completed == 5
    layout = StateLayout(tmp_path / "state")
    with_model = [r for r in range(1, 6) if (layout.model_dir(r) / "model.onnx").is_file()]
    assert with_model == [2, 4, 5]
    records = {r: json.loads(layout.model_record(r).read_text()) for r in range(1, 6)}
    assert [records[r]["model"] for r in (1, 3)] == [None, None]
    assert json.loads(layout.latest_json.read_text())["round"] == 5
    assert not any(layout.spool_dir(r).exists() for r in range(1, 6))   # spools dropped in the background


@pytest.mark.slow
def test_export_every_zero_writes_the_final_model_only(mlp_artifacts, tmp_path):
    config = make_config(mlp_artifacts, tmp_path / "state", rounds=3, min_clients=1, export_every=0)
    run(config, tmp_path)
    layout = StateLayout(tmp_path / "state")
    assert [r for r in range(1, 4) if (layout.model_dir(r) / "model.onnx").is_file()] == [3]


def test_a_negative_export_every_is_refused(mlp_artifacts, tmp_path):
    with pytest.raises(ConfigError, match="export_every"):
        CoordinatorConfig.from_mapping(dict(artifacts=mlp_artifacts, state_dir=tmp_path, insecure=True, export_every=-1)).validate()
