"""coordinator/export/external_data.py: a large model's export is model.onnx + model.onnx.data, a hard link to the
committed global vector (real ORT artifacts, real files; the coordinator tests restart a real coordinator)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from coordinator_fixtures import mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.coordinator import RoundState
from fedort.coordinator.export.inference import Exporter
from fedort.coordinator.export.external_data import DATA_FILE
from fedort.coordinator.status import offline_status
from fedort.common.durable import atomic_write
from fedort.ort.session import TrainingSession


def _vectors(exporter: Exporter, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    base = exporter.initial_vector()
    return [base + rng.standard_normal(base.size).astype(np.float32) for _ in range(n)]


def _committed(folder: Path, round: int, vector: np.ndarray) -> Path:
    """vectors/round-000N.f32 as the commit writes it."""
    path = folder / "vectors" / f"round-{round:04d}.f32"
    atomic_write(path, vector)
    return path


def _infer(path: Path) -> np.ndarray:
    x = np.random.default_rng(1).random((6, 64), dtype=np.float32)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["logits"], {"x": x})[0]


def _ort_export(artifacts: Path, vector: np.ndarray, path: Path) -> Path:
    session = TrainingSession.from_artifacts(artifacts)
    session.from_buffer(vector)
    return session.export_model_for_inference(path)


@pytest.mark.slow
def test_external_export_infers_exactly_what_ort_s_own_export_infers(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models", external_min_bytes=0)
    for r, v in enumerate(_vectors(exporter, 2), start=1):   # round 1 learns the splice, round 2 uses it
        path = exporter.export(r, v, {}, vector_file=_committed(tmp_path, r + 1, v))
        assert (path.parent / DATA_FILE).is_file()
        np.testing.assert_array_equal(_infer(path), _infer(_ort_export(mlp_artifacts, v, tmp_path / f"o{r}.onnx")))


def test_onnx_load_gives_the_vector_s_slices_as_the_trainable_initializers(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models", external_min_bytes=0)
    (v,) = _vectors(exporter, 1)
    path = exporter.export(1, v, {}, vector_file=_committed(tmp_path, 2, v))
    places = {}
    for init in onnx.load(str(path), load_external_data=False).graph.initializer:
        info = {e.key: e.value for e in init.external_data}
        assert init.data_location == onnx.TensorProto.EXTERNAL and info["location"] == DATA_FILE
        places[init.name] = (int(info["offset"]) // 4, int(info["length"]) // 4)
    loaded = {init.name: numpy_helper.to_array(init) for init in onnx.load(str(path)).graph.initializer}
    assert sorted(places) == sorted(loaded)
    assert sum(n for _, n in places.values()) == v.size
    for name, (start, n) in places.items():
        np.testing.assert_array_equal(loaded[name].ravel(), v[start:start + n])
    record = json.loads((path.parent / "model.json").read_text())   # no vector_sha256 given: hashed here
    assert record["model_data_sha256"] == hashlib.sha256(v.tobytes()).hexdigest()


@pytest.mark.slow
def test_data_file_is_a_hard_link_of_the_committed_vector_and_model_onnx_never_changes(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models", external_min_bytes=0)
    models = set()
    for r, v in enumerate(_vectors(exporter, 3), start=1):
        vector_file = _committed(tmp_path, r + 1, v)
        sha = hashlib.sha256(v.tobytes()).hexdigest()
        path = exporter.export(r, v, {"vector_sha256": sha}, vector_file=vector_file)
        data = path.parent / DATA_FILE
        assert os.stat(data).st_ino == os.stat(vector_file).st_ino
        record = json.loads((path.parent / "model.json").read_text())
        assert record["model_data"] == DATA_FILE and record["model_data_sha256"] == sha
        assert record["model_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []   # no temporary left
        models.add(path.read_bytes())
    assert len(models) == 1   # serialized once: the graph and the parameters' places are the same every round
    latest = tmp_path / "models" / "latest" / "model.onnx"   # through the `latest` symlink, data file and all
    np.testing.assert_array_equal(_infer(latest), _infer(path))
    assert len(onnx.load(str(latest)).graph.initializer[0].raw_data) > 0


@pytest.mark.slow
def test_older_exports_still_load_their_own_parameters_after_later_rounds(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models", external_min_bytes=0)
    vectors = _vectors(exporter, 3)
    paths = [exporter.export(r, v, {}, vector_file=_committed(tmp_path, r + 1, v)) for r, v in enumerate(vectors, 1)]
    for r, (path, v) in enumerate(zip(paths, vectors), start=1):
        np.testing.assert_array_equal(_infer(path), _infer(_ort_export(mlp_artifacts, v, tmp_path / f"o{r}.onnx")))


def test_a_model_below_the_threshold_is_one_self_contained_file(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models")   # default threshold 1 MiB; the MLP's 9610 take 38 KB
    for r, v in enumerate(_vectors(exporter, 2), start=1):
        path = exporter.export(r, v, {}, vector_file=_committed(tmp_path, r + 1, v))
        assert path.read_bytes() == _ort_export(mlp_artifacts, v, tmp_path / f"o{r}.onnx").read_bytes()
        assert not (path.parent / DATA_FILE).exists()
        assert json.loads((path.parent / "model.json").read_text())["model_data"] is None


@pytest.mark.slow
def test_a_vector_on_another_filesystem_gives_self_contained_models(mlp_artifacts, tmp_path, caplog,
                                                                   other_filesystem_dir):
    exporter = Exporter(mlp_artifacts, tmp_path / "models", external_min_bytes=0)
    for r, v in enumerate(_vectors(exporter, 2), start=1):
        path = exporter.export(r, v, {}, vector_file=_committed(other_filesystem_dir, r + 1, v))   # link(2): EXDEV
        assert path.read_bytes() == _ort_export(mlp_artifacts, v, tmp_path / f"o{r}.onnx").read_bytes()
        assert not (path.parent / DATA_FILE).exists()
    assert "cannot hard-link" in caplog.text


# ---- the coordinator: restart, integrity ---------------------------------------------------------

async def _finished_run(start_coordinator, stub_client) -> Path:
    coord = await start_coordinator(rounds=2, export_external_bytes=0)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    for _ in range(2):
        await client.fit_round("client-a", model, delta=1.0, num_examples=30)
        await client.fit_round("client-b", model, delta=4.0, num_examples=10)
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    await coord.stop(grace=0)
    return coord.state_dir


def _linked(state: Path, round: int) -> bool:
    data = state / "models" / f"round-{round:04d}" / DATA_FILE
    return os.stat(data).st_ino == os.stat(state / "vectors" / f"round-{round + 1:04d}.f32").st_ino


@pytest.mark.slow
async def test_a_restart_redoes_an_export_interrupted_after_the_link(start_coordinator, stub_client):
    state = await _finished_run(start_coordinator, stub_client)
    folder = state / "models" / "round-0002"
    before = _infer(folder / "model.onnx")
    # the state a kill leaves between the data file's link and model.onnx: the row still COMMITTED
    (folder / "model.onnx").unlink()
    os.link(state / "vectors" / "round-0003.f32", folder / f".{DATA_FILE}.tmp")
    with sqlite3.connect(state / "state.db") as db:
        db.execute("UPDATE rounds SET state='COMMITTED' WHERE round=2")
    db.close()
    coord = await start_coordinator(rounds=2, export_external_bytes=0)
    with sqlite3.connect(state / "state.db") as db:
        assert db.execute("SELECT state FROM rounds WHERE round=2").fetchone() == ("EXPORTED",)
    db.close()
    assert _linked(state, 2) and _linked(state, 1)
    assert not (folder / f".{DATA_FILE}.tmp").exists()
    np.testing.assert_array_equal(_infer(folder / "model.onnx"), before)
    assert coord.engine.status().latest_model == str(folder / "model.onnx")


@pytest.mark.slow
async def test_a_replaced_data_file_is_not_latest_and_is_exported_again(start_coordinator, stub_client):
    state = await _finished_run(start_coordinator, stub_client)
    folder = state / "models" / "round-0002"
    data = folder / DATA_FILE
    before = _infer(folder / "model.onnx")
    data.unlink()
    data.write_bytes(np.zeros(9610, np.float32).tobytes())   # same length, other bytes, another file
    status = offline_status(state)
    assert status.latest_model == "" and f"{data} hashes to" in status.latest_problem
    coord = await start_coordinator(rounds=2, export_external_bytes=0)
    assert _linked(state, 2)
    np.testing.assert_array_equal(_infer(folder / "model.onnx"), before)
    assert coord.engine.status().latest_model == str(folder / "model.onnx")
