"""Partitioners: disjoint and complete, reproducible per seed, with the skew each scheme promises."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from fedort.common.errors import ConfigError
from fedort.simulations.data.partition import Partition, dirichlet, iid, label_histogram, parse_partition, shards

LABELS = np.repeat(np.arange(10), 150)  # 1,500 examples, 10 balanced labels
np.random.default_rng(123).shuffle(LABELS)


def assert_exact_cover(parts, n):
    everything = np.concatenate(parts)
    assert len(everything) == n
    assert np.array_equal(np.sort(everything), np.arange(n))
    for p in parts:
        assert p.dtype.kind == "i" and np.all(np.diff(p) > 0)  # sorted, no repeats


def mean_skew(parts, labels=LABELS):
    """Mean over clients of the total-variation distance between its label mix and the global one."""
    hist = label_histogram(labels, parts, 10).astype(float)
    local = hist / hist.sum(axis=1, keepdims=True)
    overall = np.bincount(labels, minlength=10) / len(labels)
    return 0.5 * np.abs(local - overall).sum(axis=1).mean()


@pytest.mark.parametrize("make", [
    lambda seed: iid(len(LABELS), 7, seed),
    lambda seed: dirichlet(LABELS, 7, 0.5, seed),
    lambda seed: shards(LABELS, 7, 2, seed),
], ids=["iid", "dirichlet", "shards"])
def test_parts_are_disjoint_cover_all_and_depend_only_on_the_seed(make):
    first, again, other = make(0), make(0), make(1)
    assert len(first) == 7
    assert_exact_cover(first, len(LABELS))
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_iid_sizes_differ_by_at_most_one():
    sizes = [len(p) for p in iid(1003, 10, seed=0)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1003


def test_dirichlet_skew_grows_as_alpha_shrinks():
    skew = {a: np.mean([mean_skew(dirichlet(LABELS, 10, a, s)) for s in range(3)]) for a in (100.0, 1.0, 0.1)}
    assert skew[100.0] < skew[1.0] < skew[0.1]
    assert skew[100.0] < 0.15 and skew[0.1] > 0.5


def test_dirichlet_redraws_until_every_client_has_min_size():
    assert min(len(p) for p in dirichlet(LABELS, 20, 0.1, seed=0, min_size=0)) < 20  # first draw too small
    parts = dirichlet(LABELS, 20, 0.1, seed=0, min_size=20)
    assert min(len(p) for p in parts) >= 20
    assert_exact_cover(parts, len(LABELS))


@pytest.mark.slow
@pytest.mark.parametrize("clients, alpha, min_size", [(1000, 0.5, 1), (1000, 0.05, 1), (300, 0.1, 4), (300, 0.5, 5)])
def test_dirichlet_over_more_clients_than_a_draw_can_fill_gives_everyone_min_size(clients, alpha, min_size):
    assert min(len(p) for p in dirichlet(LABELS, clients, alpha, seed=0, min_size=0)) < min_size  # draws fall short
    parts = dirichlet(LABELS, clients, alpha, seed=0, min_size=min_size)
    assert len(parts) == clients
    assert min(len(p) for p in parts) >= min_size
    assert_exact_cover(parts, len(LABELS))


@pytest.mark.slow
def test_a_topped_up_dirichlet_partition_depends_only_on_the_seed():
    first, again, other = (dirichlet(LABELS, 1000, 0.5, seed=s, min_size=1) for s in (0, 0, 1))
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


@pytest.mark.slow
def test_a_topped_up_dirichlet_partition_keeps_its_label_skew():
    topped = dirichlet(LABELS, 200, 0.1, seed=0, min_size=5)
    assert min(len(p) for p in dirichlet(LABELS, 200, 0.1, seed=0, min_size=0)) < 5  # it was topped up
    assert mean_skew(topped) > mean_skew(iid(len(LABELS), 200, seed=0)) + 0.2


def test_dirichlet_min_size_beyond_the_examples_is_a_config_error():
    with pytest.raises(ConfigError, match="cannot give 1000 clients 2 examples each from 1500 examples"):
        dirichlet(LABELS, 1000, 0.5, seed=0, min_size=2)


def test_the_readme_tasks_dirichlet_split_of_digits_never_changes():
    from fedort.simulations.data.datasets import load_digits_split

    train, _ = load_digits_split(0.2, 0)
    parts = dirichlet(train["labels"], 10, 0.5, seed=0)
    digest = hashlib.sha256(b"".join(p.astype(np.int64).tobytes() + b"|" for p in parts)).hexdigest()
    assert digest == "c400e42d0012761aebec3d181f54c18c4dcebd09c3440fbceb81bf3db47dfa85"


def test_shards_give_each_client_at_most_k_labels():
    for k in (1, 2, 3):
        hist = label_histogram(LABELS, shards(LABELS, 10, k, seed=0), 10)
        assert (hist > 0).sum(axis=1).max() <= k


def test_shards_keep_shards_single_label_with_unequal_classes():
    labels = np.concatenate([np.full(n, c) for c, n in enumerate([50, 300, 120, 77, 10])])
    parts = shards(labels, 9, 2, seed=0)
    assert_exact_cover(parts, len(labels))
    assert (label_histogram(labels, parts) > 0).sum(axis=1).max() <= 2


def test_shards_need_at_least_one_shard_per_label():
    with pytest.raises(ConfigError, match="fewer than the 10 labels"):
        shards(LABELS, 4, 2, seed=0)


def test_a_thousand_clients_partition_60k_examples_exactly():
    labels = np.random.default_rng(0).integers(0, 10, 60_000)
    for parts in (iid(60_000, 1000, 0), dirichlet(labels, 1000, 0.5, 0, min_size=5), shards(labels, 1000, 2, 0)):
        assert len(parts) == 1000
        assert_exact_cover(parts, 60_000)


def test_more_clients_than_examples_is_a_config_error():
    with pytest.raises(ConfigError, match="cannot split 5 examples among 6 clients"):
        iid(5, 6, 0)


@pytest.mark.parametrize("spec, expected", [
    ("iid", Partition("iid")),
    ("dirichlet:0.5", Partition("dirichlet", alpha=0.5)),
    ("Dirichlet:2", Partition("dirichlet", alpha=2.0)),
    ("shards:2", Partition("shards", shards_per_client=2)),
])
def test_parse_partition_reads_the_command_line_forms(spec, expected):
    parsed = parse_partition(spec)
    assert parsed == expected
    assert parse_partition(str(parsed)) == parsed


@pytest.mark.parametrize("spec", ["", "iid:3", "dirichlet", "dirichlet:abc", "dirichlet:0", "dirichlet:-1",
                                  "dirichlet:nan", "shards:0", "shards:1.5", "random"])
def test_parse_partition_rejects_bad_specs_with_the_expected_forms(spec):
    with pytest.raises(ConfigError, match="expected iid, dirichlet:ALPHA"):
        parse_partition(spec)


def test_a_parsed_partition_splits_labels():
    parts = parse_partition("shards:1")(LABELS, 10, seed=0)
    assert (label_histogram(LABELS, parts, 10) > 0).sum(axis=1).tolist() == [1] * 10
