"""coordinator/export/splice.py: after one ORT export, later rounds' model files are spliced, byte for byte ORT's."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from fedort.coordinator.export.inference import Exporter
from fedort.coordinator.export.splice import ModelSplice
from coordinator_fixtures import mlp_artifacts  # noqa: F401
from fedort.ort.session import TrainingSession


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
    (vector,) = _vectors(exporter, 1)
    n = vector.size
    splice = ModelSplice.learn(_ort_export(mlp_artifacts, ModelSplice.probe(n), tmp_path / "p.onnx"), n)
    assert splice is not None
    assert bytes(splice.render(vector)) == _ort_export(mlp_artifacts, vector, tmp_path / "b.onnx")


@pytest.mark.slow
def test_exporter_s_later_rounds_match_ort_and_their_recorded_sha256(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models")
    vectors = _vectors(exporter, 3)
    for r, v in enumerate(vectors, start=1):
        path = exporter.export(r, v, {})
        data = path.read_bytes()
        assert data == _ort_export(mlp_artifacts, v, tmp_path / f"ort-{r}.onnx")
        assert json.loads((path.parent / "model.json").read_text())["model_sha256"] == hashlib.sha256(data).hexdigest()
    assert exporter._splice is not None   # rounds 2 and 3 were spliced, not exported through ORT


def test_an_exporter_prepared_at_start_splices_its_first_export_byte_for_byte_as_ort(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models")
    exporter.prepare(exporter.initial_vector())     # the coordinator does this while clients join
    assert exporter._splice is not None               # learned before any export
    (vector,) = _vectors(exporter, 1)
    data = exporter.export(1, vector, {}).read_bytes()
    assert data == _ort_export(mlp_artifacts, vector, tmp_path / "ort.onnx")
    assert [p.name for p in (tmp_path / "models").iterdir() if p.name.startswith(".")] == []   # nothing left over


def test_a_model_not_exported_from_the_probe_gives_no_splice(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models")
    (vector,) = _vectors(exporter, 1)   # its parameters' places cannot be read from their values
    assert ModelSplice.learn(_ort_export(mlp_artifacts, vector, tmp_path / "v.onnx"), vector.size) is None


def test_chunks_are_the_rendered_model_in_file_order(mlp_artifacts, tmp_path):
    exporter = Exporter(mlp_artifacts, tmp_path / "models")
    (vector,) = _vectors(exporter, 1)
    n = vector.size
    splice = ModelSplice.learn(_ort_export(mlp_artifacts, ModelSplice.probe(n), tmp_path / "p.onnx"), n)
    for step in (7, 4096, 1 << 20):
        pieces = list(splice.chunks(vector, step))
        assert max(len(p) for p in pieces) <= step
        assert b"".join(pieces) == bytes(splice.render(vector))
