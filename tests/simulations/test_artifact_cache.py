"""The machine's cache of built-in models' artifacts: reused only when verified and built from the same inputs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import pytest
from pathlib import Path

from fedort.ort.artifacts import ARTIFACT_FILES, MANIFEST, build_artifacts, verify_artifacts
from fedort.ort.models import builtin_model
from fedort.simulations.artifact_cache import KEY_FILE, artifacts_key, cached_builtin_artifacts, entry_dir


def _stamp(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def _entries(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "artifacts").iterdir())


def test_a_miss_builds_the_same_artifacts_as_build_artifacts_and_caches_them(tmp_path):
    direct = build_artifacts(builtin_model("mlp", seed=3), tmp_path / "direct", optimizer="sgd")
    got = cached_builtin_artifacts("mlp", 3, "sgd", tmp_path / "run", root=tmp_path / "cache")
    assert got.model_id == direct.model_id
    assert verify_artifacts(tmp_path / "run").model_id == direct.model_id
    entry = entry_dir(artifacts_key("mlp", 3, "sgd"), tmp_path / "cache")
    assert verify_artifacts(entry).model_id == direct.model_id
    assert json.loads((entry / KEY_FILE).read_text()) == artifacts_key("mlp", 3, "sgd")


def test_a_hit_copies_the_entry_without_rebuilding_it(tmp_path):
    root = tmp_path / "cache"
    first = cached_builtin_artifacts("mlp", 0, "adamw", tmp_path / "run1", root=root)
    entry = entry_dir(artifacts_key("mlp", 0, "adamw"), root)
    before = _stamp(entry)
    second = cached_builtin_artifacts("mlp", 0, "adamw", tmp_path / "run2", root=root)
    assert second.model_id == first.model_id
    assert _stamp(entry) == before            # same files, untouched: nothing was built
    for name in (*ARTIFACT_FILES, MANIFEST):
        assert (tmp_path / "run2" / name).read_bytes() == (entry / name).read_bytes()
    assert _entries(root) == [entry.name]     # no build or trash folders left


def test_a_corrupt_entry_is_rebuilt_and_never_handed_to_a_run(tmp_path):
    root = tmp_path / "cache"
    good = cached_builtin_artifacts("mlp", 0, "adamw", tmp_path / "run1", root=root)
    entry = entry_dir(artifacts_key("mlp", 0, "adamw"), root)
    blob = bytearray((entry / "checkpoint").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (entry / "checkpoint").write_bytes(bytes(blob))

    again = cached_builtin_artifacts("mlp", 0, "adamw", tmp_path / "run2", root=root)
    assert again.model_id == good.model_id
    assert verify_artifacts(tmp_path / "run2").model_id == good.model_id
    assert verify_artifacts(entry).model_id == good.model_id     # the entry itself was replaced
    assert _entries(root) == [entry.name]


def test_a_truncated_manifest_is_rebuilt(tmp_path):
    root = tmp_path / "cache"
    good = cached_builtin_artifacts("mlp", 0, "adamw", tmp_path / "run1", root=root)
    entry = entry_dir(artifacts_key("mlp", 0, "adamw"), root)
    (entry / MANIFEST).write_text((entry / MANIFEST).read_text()[:40])
    assert cached_builtin_artifacts("mlp", 0, "adamw", tmp_path / "run2", root=root).model_id == good.model_id
    assert verify_artifacts(entry).model_id == good.model_id


def test_another_model_config_gets_its_own_entry(tmp_path):
    root = tmp_path / "cache"
    base = cached_builtin_artifacts("mlp", 0, "adamw", tmp_path / "a", root=root)
    other_seed = cached_builtin_artifacts("mlp", 1, "adamw", tmp_path / "b", root=root)
    other_opt = cached_builtin_artifacts("mlp", 0, "sgd", tmp_path / "c", root=root)
    other_model = cached_builtin_artifacts("logreg", 0, "adamw", tmp_path / "d", root=root)
    ids = {base.model_id, other_seed.model_id, other_opt.model_id, other_model.model_id}
    assert len(ids) == 4
    assert other_seed.model_id == build_artifacts(builtin_model("mlp", seed=1), tmp_path / "e").model_id
    assert len(_entries(root)) == 4


def test_an_entry_built_from_other_inputs_is_not_reused_even_under_this_configs_name(tmp_path):
    root = tmp_path / "cache"
    seed0 = cached_builtin_artifacts("mlp", 0, "adamw", tmp_path / "a", root=root)
    stale = entry_dir(artifacts_key("mlp", 1, "adamw"), root)
    # valid artifacts (their manifest checks out), but of seed 0, where seed 1's entry belongs
    shutil.copytree(entry_dir(artifacts_key("mlp", 0, "adamw"), root), stale)
    seed1 = cached_builtin_artifacts("mlp", 1, "adamw", tmp_path / "b", root=root)
    assert seed1.model_id != seed0.model_id
    assert seed1.model_id == build_artifacts(builtin_model("mlp", seed=1), tmp_path / "direct").model_id
    assert json.loads((stale / KEY_FILE).read_text())["seed"] == 1


def test_the_key_names_the_builder_and_library_versions():
    key = artifacts_key("mlp", 0, "adamw")
    assert set(key["versions"]) == {"onnx", "onnxruntime", "numpy"}
    assert all(v != "none" for v in key["versions"].values())
    assert len(key["builder_sha256"]) == 64


def test_another_library_version_or_builder_source_names_another_entry(tmp_path):
    key = artifacts_key("mlp", 0, "adamw")
    other_onnx = {**key, "versions": {**key["versions"], "onnx": "onnx==0.0.0"}}
    other_builder = {**key, "builder_sha256": "0" * 64}
    names = {entry_dir(k, tmp_path).name for k in (key, other_onnx, other_builder)}
    assert len(names) == 3


def test_an_unwritable_cache_still_gives_the_run_its_artifacts(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache folder would be")
    got = cached_builtin_artifacts("mlp", 0, "adamw", tmp_path / "run", root=blocker)
    assert verify_artifacts(tmp_path / "run").model_id == got.model_id


@pytest.mark.slow
def test_concurrent_first_runs_publish_one_complete_entry(tmp_path):
    root = tmp_path / "cache"
    code = ("import sys; from pathlib import Path\n"
            "from fedort.simulations.artifact_cache import cached_builtin_artifacts\n"
            "print(cached_builtin_artifacts('mlp', 0, 'adamw', Path(sys.argv[1]), root=Path(sys.argv[2])).model_id)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / f"run{i}"), str(root)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-1000:] for _, err in outs]
    ids = {out.strip() for out, _ in outs}
    assert len(ids) == 1
    entry = entry_dir(artifacts_key("mlp", 0, "adamw"), root)
    assert _entries(root) == [entry.name]
    assert verify_artifacts(entry).model_id in ids
    for i in range(3):
        assert verify_artifacts(tmp_path / f"run{i}").model_id in ids
    assert not [n for n in os.listdir(root / "artifacts") if n.startswith(".")]


@pytest.mark.slow
def test_a_run_whose_artifacts_are_cached_never_imports_onnx(tmp_path):
    """Importing onnx and ORT's artifact generator was most of the artifact step of every run."""
    code = ("import sys; from pathlib import Path\n"
            "import fedort.simulations.runner\n"
            "from fedort.simulations.artifact_cache import cached_builtin_artifacts\n"
            "cached_builtin_artifacts('mlp', 0, 'adamw', Path(sys.argv[1]), root=Path(sys.argv[2]))\n"
            "print(sorted(m for m in ('onnx', 'onnxruntime.training.artifacts') if m in sys.modules))")
    runs = [subprocess.run([sys.executable, "-c", code, str(tmp_path / f"run{i}"), str(tmp_path / "cache")],
                           capture_output=True, text=True, timeout=300) for i in range(2)]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr[-1000:] for r in runs]
    assert runs[0].stdout.split("\n")[-2] == "['onnx', 'onnxruntime.training.artifacts']"   # the miss built them
    assert runs[1].stdout.split("\n")[-2] == "[]"
