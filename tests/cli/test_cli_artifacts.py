"""`fedort artifacts build|show` through the real dispatcher (and once through the installed script)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import onnx
import pytest

from fedort.ort.artifacts import load_manifest
from fedort.cli import main
from fedort.ort.models import mlp


def test_build_builtin_writes_artifacts_and_prints_the_model_id(tmp_path, capsys):
    assert main(["artifacts", "build", "--builtin", "mlp", "--out", str(tmp_path / "art")]) == 0
    manifest = load_manifest(tmp_path / "art")
    out = capsys.readouterr().out
    assert f"model id:       {manifest.model_id}" in out
    assert "parameters:     9610 trainable (float32)" in out
    assert manifest.optimizer == "adamw" and manifest.loss == "cross-entropy"


def test_build_seed_changes_the_builtin_weights(tmp_path):
    main(["artifacts", "build", "--builtin", "cnn", "--out", str(tmp_path / "a")])
    main(["artifacts", "build", "--builtin", "cnn", "--seed", "1", "--out", str(tmp_path / "b")])
    assert load_manifest(tmp_path / "a").model_id != load_manifest(tmp_path / "b").model_id


def test_build_from_a_model_file_with_options(tmp_path):
    onnx.save(mlp(), tmp_path / "net.onnx")
    code = main(["artifacts", "build", "--model", str(tmp_path / "net.onnx"), "--out", str(tmp_path / "art"),
                 "--loss", "mse", "--optimizer", "sgd", "--frozen", "fc1.weight", "fc1.bias", "--output", "logits"])
    assert code == 0
    m = load_manifest(tmp_path / "art")
    assert (m.loss, m.optimizer, m.frozen, m.inference_outputs, m.parameter_count) == (
        "mse", "sgd", ("fc1.weight", "fc1.bias"), ("logits",), 1290)


def test_build_with_trainable_names(tmp_path):
    main(["artifacts", "build", "--builtin", "mlp", "--out", str(tmp_path), "--trainable", "fc2.weight"])
    assert load_manifest(tmp_path).trainable == ("fc2.weight",)


def test_show_prints_the_manifest_summary(mlp_artifacts, capsys):
    assert main(["artifacts", "show", str(mlp_artifacts)]) == 0
    out = capsys.readouterr().out
    assert "inputs:         x: float32[?, 64], labels: int64[?]" in out
    assert "export keeps:   logits" in out
    assert "training_model.onnx" in out and "checkpoint" in out


def test_show_refuses_a_corrupt_folder(mlp_artifacts, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(mlp_artifacts, copy)
    (copy / "checkpoint").write_bytes(b"tampered")
    assert main(["artifacts", "show", str(copy)]) == 1
    assert "checkpoint is corrupt" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["artifacts", "show", "/nonexistent/folder"], "no manifest.json"),
    (["artifacts", "build", "--model", "/nonexistent.onnx", "--out", "OUT"], "ONNX model file not found"),
    (["artifacts", "build", "--model", "MODEL", "--seed", "3", "--out", "OUT"], "--seed only applies to --builtin"),
    (["artifacts", "build", "--builtin", "mlp", "--frozen", "nope", "--out", "OUT"], "not float initializers"),
])
def test_user_errors_exit_1_with_a_message(argv, message, tmp_path, capsys):
    onnx.save(mlp(), tmp_path / "m.onnx")
    argv = [str(tmp_path / "m.onnx") if a == "MODEL" else str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert main(argv) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["artifacts", "build", "--out", "x"],                                   # no source
    ["artifacts", "build", "--builtin", "mlp", "--model", "m.onnx", "--out", "x"],  # two sources
    ["artifacts", "build", "--builtin", "resnet", "--out", "x"],            # unknown builtin
    ["artifacts", "build", "--builtin", "mlp", "--out", "x", "--loss", "hinge"],
])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "usage: fedort artifacts build" in capsys.readouterr().err


def test_help_describes_the_options(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["artifacts", "build", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for text in ("--builtin {cnn,logreg,mlp}", "--frozen NAME", "--trainable NAME", "--output NAME", "opset <= 21"):
        assert text in out


@pytest.mark.slow
def test_the_installed_fedort_script_builds(tmp_path):
    fedort = shutil.which("fedort") or str(__import__("pathlib").Path(sys.executable).with_name("fedort"))
    out = subprocess.run([fedort, "artifacts", "build", "--builtin", "mlp", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert load_manifest(tmp_path).parameter_count == 9610


def test_build_refuses_an_existing_non_empty_out_unless_forced(tmp_path, capsys):
    out = tmp_path / "art"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["artifacts", "build", "--builtin", "mlp", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "exists and is not empty" in err and "pass --force" in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]          # nothing was written
    assert main(["artifacts", "build", "--builtin", "mlp", "--out", str(out), "--force"]) == 0
    assert load_manifest(out).parameter_count == 9610
