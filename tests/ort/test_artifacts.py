"""build_artifacts / Manifest / verify_artifacts over real ORT artifact generation."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import pytest

from fedort.common.errors import ArtifactError, ConfigError
from fedort.ort.artifacts import (
    ARTIFACT_FILES, MANIFEST, Manifest, build_artifacts, copy_artifacts, load_manifest, sha256_file, verify_artifacts,
)
from fedort.ort.models import mlp
from fedort.ort.session import TrainingSession


def test_build_writes_the_four_files_and_a_manifest(tmp_path):
    manifest = build_artifacts(mlp(), tmp_path / "new" / "dir")
    folder = tmp_path / "new" / "dir"
    assert sorted(p.name for p in folder.iterdir()) == sorted([*ARTIFACT_FILES, MANIFEST])
    for name in ARTIFACT_FILES:
        assert manifest.files[name].sha256 == sha256_file(folder / name)
        assert manifest.files[name].size == (folder / name).stat().st_size
    assert manifest.parameter_count == 9610
    assert [(s.name, s.dtype, s.shape) for s in manifest.inputs] == [("x", "float32", (None, 64)),
                                                                     ("labels", "int64", (None,))]
    assert manifest.eval_outputs == ("loss", "logits")
    assert manifest.inference_outputs == ("logits",)
    assert manifest.trainable == ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")
    assert (manifest.loss, manifest.optimizer, manifest.opset) == ("cross-entropy", "adamw", 17)
    assert len(manifest.model_id) == 64


def test_the_same_model_gives_the_same_model_id_twice_in_one_process(tmp_path):
    # onnxblock numbers generated names process-wide; the build restarts the count.
    first = build_artifacts(mlp(), tmp_path / "a")
    second = build_artifacts(mlp(), tmp_path / "b")
    assert first.model_id == second.model_id
    assert second.train_outputs[0] == "loss"


def test_different_weights_give_a_different_model_id(tmp_path):
    assert build_artifacts(mlp(seed=0), tmp_path / "a").model_id != build_artifacts(mlp(seed=1), tmp_path / "b").model_id


def test_manifest_round_trips_through_json(mlp_artifacts):
    manifest = load_manifest(mlp_artifacts)
    again = Manifest.from_json(manifest.to_json())
    assert again == manifest
    assert again.feature_inputs[0].name == "x" and again.label_count == 1


def test_a_manifest_whose_id_does_not_match_its_content_is_rejected(mlp_artifacts):
    d = json.loads((mlp_artifacts / MANIFEST).read_text())
    d["parameter_count"] = 1
    with pytest.raises(ArtifactError, match="claims model id"):
        Manifest.from_json(json.dumps(d))


def test_a_folder_without_manifest_is_an_artifact_error(tmp_path):
    with pytest.raises(ArtifactError, match="no manifest.json"):
        load_manifest(tmp_path)


def test_not_a_manifest_is_an_artifact_error():
    with pytest.raises(ArtifactError, match="not a fedort manifest"):
        Manifest.from_json('{"files": {}}')


def test_verify_detects_a_corrupt_file(tmp_path):
    build_artifacts(mlp(), tmp_path)
    verify_artifacts(tmp_path)
    data = bytearray((tmp_path / "eval_model.onnx").read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / "eval_model.onnx").write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="eval_model.onnx is corrupt"):
        verify_artifacts(tmp_path)


def test_verify_detects_a_missing_file(tmp_path):
    build_artifacts(mlp(), tmp_path)
    (tmp_path / "checkpoint").unlink()
    with pytest.raises(ArtifactError, match="checkpoint missing"):
        verify_artifacts(tmp_path)


def test_copy_artifacts_copies_a_verified_folder(mlp_artifacts, tmp_path):
    manifest = copy_artifacts(mlp_artifacts, tmp_path / "copy")
    assert verify_artifacts(tmp_path / "copy") == manifest


def test_frozen_parameters_leave_the_vector(tmp_path):
    manifest = build_artifacts(mlp(), tmp_path, frozen=["fc1.weight"])
    assert manifest.trainable == ("fc1.bias", "fc2.weight", "fc2.bias")
    assert manifest.frozen == ("fc1.weight",)
    assert manifest.parameter_count == 9610 - 64 * 128


def test_trainable_subset_freezes_the_rest(tmp_path):
    manifest = build_artifacts(mlp(), tmp_path, trainable=["fc2.weight", "fc2.bias"])
    assert manifest.frozen == ("fc1.weight", "fc1.bias")
    assert TrainingSession.from_artifacts(tmp_path).parameter_count() == 1290


def test_a_model_file_path_is_accepted(tmp_path):
    onnx.save(mlp(), tmp_path / "net.onnx")
    assert build_artifacts(tmp_path / "net.onnx", tmp_path / "out").parameter_count == 9610


def test_mse_loss_takes_a_float_target_shaped_like_the_output(tmp_path):
    manifest = build_artifacts(mlp(), tmp_path, loss="mse", optimizer="sgd")
    assert [(s.dtype, s.shape) for s in manifest.inputs] == [("float32", (None, 64)), ("float32", (None, 10))]
    s = TrainingSession.from_artifacts(tmp_path)
    x = np.zeros((4, 64), np.float32)
    out = s.train_step(x, np.ones((4, 10), np.float32))
    assert float(out[manifest.train_outputs[0]]) == pytest.approx(1.0)  # mean((0 - 1)^2) at x = 0, zero biases


@pytest.mark.parametrize("kwargs, message", [
    ({"loss": "hinge"}, "unknown loss 'hinge'"),
    ({"optimizer": "lbfgs"}, "unknown optimizer 'lbfgs'"),
    ({"frozen": ["nope"]}, r"not float initializers of the model: \['nope'\]"),
    ({"trainable": ["fc1.weight", "typo"]}, r"\['typo'\]"),
    ({"trainable": []}, "no trainable parameters"),
    ({"inference_outputs": ["probs"]}, r"inference outputs \['probs'\] are not outputs"),
])
def test_bad_build_options_are_config_errors(tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        build_artifacts(mlp(), tmp_path, **kwargs)


def test_opset_22_model_is_rejected(tmp_path):
    model = mlp()
    model.opset_import[0].version = 22
    with pytest.raises(ConfigError, match="opset 22; ONNX Runtime 1.19 supports opset <= 21"):
        build_artifacts(model, tmp_path)


def test_ir_version_11_model_is_rejected(tmp_path):
    model = mlp()
    model.ir_version = 11
    with pytest.raises(ConfigError, match="IR version 11"):
        build_artifacts(model, tmp_path)


def test_missing_or_garbage_model_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="ONNX model file not found"):
        build_artifacts(tmp_path / "none.onnx", tmp_path / "out")
    (tmp_path / "bad.onnx").write_bytes(b"not a protobuf at all \xff\xfe")
    with pytest.raises(ConfigError, match="is not an ONNX model"):
        build_artifacts(tmp_path / "bad.onnx", tmp_path / "out")


def test_a_cross_entropy_manifest_records_the_class_count(mlp_artifacts):
    manifest = load_manifest(mlp_artifacts)
    assert manifest.num_classes == 10 and manifest.class_labels == ("labels", 10)


def test_a_manifest_without_a_class_count_keeps_its_model_id(mlp_artifacts):
    d = json.loads((mlp_artifacts / "manifest.json").read_text())
    del d["num_classes"], d["model_id"]
    old = Manifest.from_json(json.dumps(d))  # as written before the class count was recorded
    before = hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert old.num_classes is None and old.model_id == before
    assert "num_classes" not in json.loads(old.to_json())
