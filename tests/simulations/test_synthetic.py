"""Synthetic(α, β) of the FedProx paper: seeded, the paper's shapes, and what α and β change."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from fedort.common.errors import ConfigError
from fedort.simulations.data.datasets import load_npz_folder
from fedort.simulations.data.synthetic import generate, parse_synthetic, synthetic_split


def test_the_same_seed_gives_the_same_data_and_another_seed_other_data():
    a, b, c = generate(1, 1, 5, seed=3), generate(1, 1, 5, seed=3), generate(1, 1, 5, seed=4)
    for x, y in zip(a, b):
        assert np.array_equal(x["x"], y["x"]) and np.array_equal(x["labels"], y["labels"])
    assert not np.array_equal(a[0]["x"][:10], c[0]["x"][:10])


def test_shapes_dtypes_labels_and_power_law_sizes():
    clients = generate(1, 1, 30, seed=0)
    sizes = np.array([len(c["labels"]) for c in clients])
    for c in clients:
        assert c["x"].dtype == np.float32 and c["x"].shape[1] == 60 and c["labels"].dtype == np.int64
        assert c["labels"].min() >= 0 and c["labels"].max() <= 9
    assert sizes.min() >= 50 and sizes.max() > 4 * np.median(sizes)  # lognormal(4, 2) + 50: a heavy tail


def test_beta_spreads_the_clients_input_means():
    def spread(beta):
        return float(np.std([c["x"].mean() for c in generate(0, beta, 30, seed=0)]))

    assert spread(0.0) < 0.3 < 0.6 < spread(1.0) < spread(3.0)


def test_alpha_shifts_every_class_logit_alike_so_the_data_do_not_depend_on_it():
    # W_k ~ N(u_k, 1), b_k ~ N(u_k, 1): u_k adds u_k * (sum(x) + 1) to every logit; the argmax ignores it
    for small, large in zip(generate(0, 1, 10, seed=2), generate(5, 1, 10, seed=2)):
        assert np.array_equal(small["x"], large["x"]) and np.array_equal(small["labels"], large["labels"])


def test_clients_are_label_skewed_unlike_the_pool():
    clients = generate(1, 1, 30, seed=0)
    pooled = np.bincount(np.concatenate([c["labels"] for c in clients]), minlength=10) / sum(
        len(c["labels"]) for c in clients)
    tv = [0.5 * np.abs(np.bincount(c["labels"], minlength=10) / len(c["labels"]) - pooled).sum() for c in clients]
    assert np.mean(tv) > 0.5  # most of a client's labels are classes the pool rarely sees


def test_the_split_keeps_90_percent_per_client_and_pools_the_rest():
    train, test = synthetic_split(1, 1, 4, seed=0)
    full = generate(1, 1, 4, seed=0)
    assert sum(len(t["labels"]) for t in train) + len(test["labels"]) == sum(len(f["labels"]) for f in full)
    for t, f in zip(train, full):
        assert abs(len(t["labels"]) - 0.9 * len(f["labels"])) <= 1
        assert np.array_equal(t["x"], f["x"][: len(t["x"])])


@pytest.mark.parametrize("spec", ["synthetic:1", "synthetic:a,b", "digits:1,1", "synthetic:-1,0"])
def test_bad_specs_are_config_errors(spec):
    with pytest.raises(ConfigError):
        parse_synthetic(spec)


@pytest.mark.slow
def test_data_synthetic_cli_writes_a_folder_like_data_digits(tmp_path):
    out = tmp_path / "syn"
    done = subprocess.run([sys.executable, "-m", "fedort", "data", "synthetic", "--alpha", "1", "--beta", "1",
                           "--clients", "6", "--seed", "1", "--out", str(out)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    data = load_npz_folder(out)
    summary = json.loads((out / "partition.json").read_text())
    assert summary["dataset"] == "synthetic:1,1" and data.sizes == summary["sizes"] and len(data.clients) == 6
    train, test = synthetic_split(1, 1, 6, seed=1)
    assert np.array_equal(data.clients[5]["x"], train[5]["x"]) and np.array_equal(data.test["labels"], test["labels"])
