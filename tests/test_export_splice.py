"""coordinator/export_splice.py: after one ORT export, later rounds' model files are spliced, byte for byte ORT's."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from fedort.coordinator.export import Exporter
from fedort.coordinator.export_splice import ModelSplice
from coordinator_fixtures import mlp_artifacts  # noqa: F401
from fedort.edge_client.session import TrainingSession


def _ort_export(artifacts, vector, path):
    session = TrainingSession.from_artifacts(artifacts)
    session.from_buffer(vector)
    return session.export_model_for_inference(path).read_bytes()


def _vectors(exporter, n):
    rng = np.random.default_rng(3)
    base = exporter.initial_vector()
    return [base + rng.standard_normal(base.size).astype(np.float32) for _ in range(n)]


def test_spliced_model_is_byte_identical_to_ort_s_export_of_the_same_vector(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models")
    first, second = _vectors(exporter, 2)
    splice = ModelSplice.learn(_ort_export(mlp_artifacts, first, tmp_path / "a.onnx"), first)
    assert splice is not None
    assert bytes(splice.render(second)) == _ort_export(mlp_artifacts, second, tmp_path / "b.onnx")


def test_exporter_s_later_rounds_match_ort_and_their_recorded_sha256(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models")
    vectors = _vectors(exporter, 3)
    for r, v in enumerate(vectors, start=1):
        path = exporter.export(r, v, {})
        data = path.read_bytes()
        assert data == _ort_export(mlp_artifacts, v, tmp_path / f"ort-{r}.onnx")
        assert json.loads((path.parent / "model.json").read_text())["model_sha256"] == hashlib.sha256(data).hexdigest()
    assert exporter._splice is not None   # rounds 2 and 3 were spliced, not exported through ORT


def test_parameters_that_cannot_be_located_unambiguously_give_no_splice(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models")
    zeros = np.zeros_like(exporter.initial_vector())   # every initializer's bytes occur many times
    assert ModelSplice.learn(_ort_export(mlp_artifacts, zeros, tmp_path / "z.onnx"), zeros) is None
