"""coordinator/export/inference.py: each committed vector becomes a model plain onnxruntime serves, with its record."""

from __future__ import annotations

import asyncio
import json
import shutil

import numpy as np
import onnxruntime as ort
import pytest

from fedort.coordinator.export.inference import Exporter
from coordinator_fixtures import mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.ort.session import TrainingSession


@pytest.fixture
def eval_npz(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "test.npz"
    np.savez(path, x=rng.random((300, 64), dtype=np.float32), labels=rng.integers(0, 10, 300).astype(np.int64))
    return path


@pytest.mark.slow
def test_exported_model_computes_what_the_training_session_computes(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models")
    vector = exporter.initial_vector() * np.float32(0.5)
    path = exporter.export(1, vector, {"clients": 2})
    x = np.random.default_rng(1).random((4, 64), dtype=np.float32)
    (logits,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["logits"], {"x": x})
    session = TrainingSession.from_artifacts(mlp_artifacts)
    session.from_buffer(vector)
    expected = session.eval_step(x, np.zeros(4, np.int64))["logits"]
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    record = json.loads((path.parent / "model.json").read_text())
    assert record["round"] == 1 and record["clients"] == 2 and len(record["model_sha256"]) == 64


def test_server_eval_records_loss_and_accuracy(mlp_artifacts, tmp_path, eval_npz):
    exporter = Exporter(mlp_artifacts, tmp_path / "models", eval_npz)
    vector = exporter.initial_vector()
    path = exporter.export(1, vector, {})
    data = np.load(eval_npz)
    (logits,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": data["x"]})
    accuracy = float((logits.argmax(1) == data["labels"]).mean())
    record = json.loads((path.parent / "model.json").read_text())
    assert record["server_eval"]["accuracy"] == pytest.approx(accuracy)
    assert record["server_eval"]["num_examples"] == 300 and record["server_eval"]["loss"] > 0


def test_latest_points_at_the_newest_round_only(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models")
    v = exporter.initial_vector()
    exporter.export(2, v, {})
    exporter.export(1, v, {})   # re-exporting an older round must not move `latest` back
    latest = json.loads((tmp_path / "models" / "latest.json").read_text())
    assert latest["round"] == 2
    assert (tmp_path / "models" / "latest").resolve() == (tmp_path / "models" / "round-0002").resolve()


@pytest.mark.slow
async def test_a_missing_export_of_a_committed_round_is_redone_on_restart(start_coordinator, stub_client, tmp_path,
                                                                          eval_npz):
    coord = await start_coordinator(rounds=1, eval_data=eval_npz)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.fit_round("client-a", model, 0.1, 5)
    await client.fit_round("client-b", model, 0.1, 5)
    await asyncio.wait_for(coord.wait_done(), 60)
    first = json.loads((coord.state_dir / "models" / "round-0001" / "model.json").read_text())
    assert first["server_eval"]["accuracy"] is not None
    await coord.stop()
    shutil.rmtree(coord.state_dir / "models" / "round-0001")
    again = await start_coordinator(rounds=1, eval_data=eval_npz)
    record = json.loads((again.state_dir / "models" / "round-0001" / "model.json").read_text())
    assert record["model_sha256"] == first["model_sha256"] and record["vector_sha256"] == first["vector_sha256"]
    assert (await asyncio.wait_for(again.wait_done(), 60)).rounds_completed == 1
