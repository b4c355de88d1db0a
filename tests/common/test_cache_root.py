"""fedort.common.cache_root: one cache root for the device cache and the simulation caches, $FEDORT_CACHE_DIR first."""

from __future__ import annotations

import sys

import pytest

from fedort.common.cache_root import cache_root
from fedort.edge_client.client.cache import ArtifactCache
from fedort.simulations.artifact_cache import cached_builtin_artifacts
from fedort.simulations.data.datasets import load_digits_split


def test_fedort_cache_dir_overrides_the_platform_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDORT_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "explicit"


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="XDG layout is the Linux default")
def test_without_it_the_root_is_the_xdg_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("FEDORT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "fedort"


def test_the_platform_folders(monkeypatch, tmp_path):
    monkeypatch.delenv("FEDORT_CACHE_DIR", raising=False)
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    assert cache_root() == tmp_path / "local" / "fedort" / "Cache"
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / "Library" / "Caches" / "fedort"


@pytest.mark.slow
def test_the_device_cache_and_both_simulation_caches_live_under_it(monkeypatch, tmp_path):
    root = tmp_path / "fedort-cache"
    monkeypatch.setenv("FEDORT_CACHE_DIR", str(root))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ArtifactCache().root == root
    load_digits_split(0.2, seed=0)
    cached_builtin_artifacts("mlp", 0, "adamw", tmp_path / "run-artifacts")
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == [
        "artifacts", "digits-split-0.2-0-sklearn" + _sklearn() + ".npz"]
    assert not (tmp_path / "xdg").exists()


def _sklearn() -> str:
    from importlib.metadata import version

    return version("scikit-learn")
