"""Fixtures shared by the edge training-core tests: real ORT artifacts and the digits data.

Artifacts are built once per test session (~0.1 s each) into a temp folder; tests that change
parameters open their own `TrainingSession` on them, so nothing leaks between tests.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from fedort.ort.artifacts import build_artifacts
from fedort.ort.models import cnn, mlp


def pytest_configure(config) -> None:
    """The whole run (every xdist worker included) caches into one fresh folder, never ~/.cache/fedort.

    Set before any test imports fedort's caches; xdist workers start after this and inherit it, so
    they share the run's folder (the caches are safe for concurrent processes). Removed at the end."""
    if hasattr(config, "workerinput"):     # an xdist worker: the controller has set it
        return
    folder = tempfile.mkdtemp(prefix="fedort-test-cache-")
    os.environ["FEDORT_CACHE_DIR"] = folder
    config._fedort_cache_dir = folder


def pytest_unconfigure(config) -> None:
    folder = getattr(config, "_fedort_cache_dir", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def _digits_split(test_fraction: float = 0.2, seed: int = 0) -> tuple[dict, dict]:
    try:
        from fedort.simulations.data.datasets import load_digits_split
    except ImportError:  # simulations not installed: the same split straight from scikit-learn
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        d = load_digits()
        x = (d.data / 16.0).astype(np.float32)
        y = d.target.astype(np.int64)
        tr, te = train_test_split(np.arange(len(y)), test_size=test_fraction, random_state=seed, stratify=y)
        return {"x": x[tr], "labels": y[tr]}, {"x": x[te], "labels": y[te]}
    return load_digits_split(test_fraction, seed)


@pytest.fixture(scope="session")
def mlp_artifacts(tmp_path_factory) -> Path:
    """Built-in MLP, cross-entropy, AdamW."""
    out = tmp_path_factory.mktemp("mlp-artifacts")
    build_artifacts(mlp(), out)
    return out


@pytest.fixture(scope="session")
def sgd_artifacts(tmp_path_factory) -> Path:
    """Built-in MLP, cross-entropy, plain SGD (linear in the gradient: exact equivalences hold)."""
    out = tmp_path_factory.mktemp("sgd-artifacts")
    build_artifacts(mlp(), out, optimizer="sgd")
    return out


@pytest.fixture(scope="session")
def cnn_artifacts(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cnn-artifacts")
    build_artifacts(cnn(), out)
    return out


@pytest.fixture(scope="session")
def digits_split() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(train, test): x float32 [N, 64] in [0, 1], labels int64; stratified 80/20 split, seed 0."""
    return _digits_split(0.2, seed=0)


@pytest.fixture(scope="session")
def digits_train(digits_split) -> dict[str, np.ndarray]:
    return digits_split[0]


@pytest.fixture(scope="session")
def digits_test(digits_split) -> dict[str, np.ndarray]:
    return digits_split[1]


@pytest.fixture
def batch(digits_train) -> tuple[np.ndarray, np.ndarray]:
    """The first 32 training examples as (x, labels)."""
    return digits_train["x"][:32], digits_train["labels"][:32]


@pytest.fixture
def other_filesystem_dir(tmp_path) -> Path:
    """A fresh folder on another filesystem than tmp_path (/dev/shm), removed with all it holds afterwards."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test's temporary folder")
    folder = Path(tempfile.mkdtemp(prefix="fedort-test-", dir=shm))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_globals_seen_from_other_tests():
    """Each test starts with an empty `coordinator_fixtures.GLOBALS_SEEN` (what the stub client names as
    trained_from_sha256): a sha256 another test saw must not decide whether this test's update is admitted,
    or the outcome would depend on the order pytest-randomly runs the tests in."""
    import sys

    fixtures = sys.modules.get("coordinator_fixtures")
    if fixtures is not None:
        fixtures.GLOBALS_SEEN.clear()
    yield
