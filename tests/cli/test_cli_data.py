"""`fedort data digits`: per-client files, test set and partition summary, through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from fedort.cli import main
from fedort.simulations.data.datasets import load_npz_folder


def fedort(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedort", *args], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.slow
def test_data_digits_writes_client_files_test_set_and_summary(tmp_path):
    out = tmp_path / "data"
    done = fedort("data", "digits", "--clients", "5", "--partition", "dirichlet:0.5", "--seed", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == [f"client-000{i}.npz" for i in range(5)] + [
        "partition.json", "test.npz"]
    summary = json.loads((out / "partition.json").read_text())
    assert summary["partition"] == "dirichlet:0.5" and summary["seed"] == 3 and summary["clients"] == 5
    data = load_npz_folder(out)
    assert data.sizes == summary["sizes"] and sum(data.sizes) == summary["train_examples"] == 1437
    for client, row in zip(data.clients, summary["label_histogram"]):
        assert client["x"].dtype == np.float32 and client["labels"].dtype == np.int64
        assert np.bincount(client["labels"], minlength=10).tolist() == row
    assert len(data.test["labels"]) == summary["test_examples"] == 360
    assert "5 clients, partition dirichlet:0.5, seed 3" in done.stdout
    assert "wrote 5 client files" in done.stdout


def read_all(folder):
    return {p.name: dict(np.load(p)) for p in sorted(folder.glob("*.npz"))}


def same(a, b):
    return a.keys() == b.keys() and all(
        a[f].keys() == b[f].keys() and all(np.array_equal(a[f][k], b[f][k]) for k in a[f]) for f in a)


@pytest.mark.slow
def test_data_digits_is_reproducible_per_seed(tmp_path):
    args = ["data", "digits", "--clients", "4", "--partition", "iid"]
    assert main(args + ["--seed", "1", "--out", str(tmp_path / "a")]) == 0
    assert main(args + ["--seed", "1", "--out", str(tmp_path / "b")]) == 0
    assert main(args + ["--seed", "2", "--out", str(tmp_path / "c")]) == 0
    a, b, c = (read_all(tmp_path / d) for d in "abc")
    assert same(a, b)
    assert not same(a, c)


def test_shards_partition_gives_each_client_at_most_k_labels(tmp_path):
    assert main(["data", "digits", "--clients", "10", "--partition", "shards:2", "--out", str(tmp_path)]) == 0
    hist = np.array(json.loads((tmp_path / "partition.json").read_text())["label_histogram"])
    assert (hist > 0).sum(axis=1).max() <= 2


def test_val_fraction_stores_a_validation_split_per_client(tmp_path):
    assert main(["data", "digits", "--clients", "3", "--val-fraction", "0.25", "--out", str(tmp_path)]) == 0
    client = np.load(tmp_path / "client-0000.npz")
    assert set(client.files) == {"x", "labels", "val_x", "val_labels"}
    total = len(client["labels"]) + len(client["val_labels"])
    assert len(client["val_labels"]) == round(0.25 * total)


def test_bad_partition_spec_fails_before_writing_anything(tmp_path, capsys):
    assert main(["data", "digits", "--partition", "dirichlet:zero", "--out", str(tmp_path / "d")]) == 1
    assert "bad partition 'dirichlet:zero'" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


@pytest.mark.slow
def test_existing_data_needs_overwrite_and_stale_clients_are_removed(tmp_path, capsys):
    assert main(["data", "digits", "--clients", "6", "--out", str(tmp_path)]) == 0
    assert main(["data", "digits", "--clients", "3", "--out", str(tmp_path)]) == 1
    assert "pass --overwrite" in capsys.readouterr().err
    assert main(["data", "digits", "--clients", "3", "--out", str(tmp_path), "--overwrite"]) == 0
    assert len(load_npz_folder(tmp_path).clients) == 3
