"""Data sets: the bundled digits split and a user's folder of per-client .npz files."""

from __future__ import annotations

import numpy as np
import pytest

from fedort.common.errors import ConfigError, DataError
from fedort.common.client_data import read_npz
from fedort.simulations.data.datasets import load_digits_split, load_npz_folder, save_npz


def test_digits_split_has_the_project_data_convention():
    train, test = load_digits_split()
    assert set(train) == set(test) == {"x", "labels"}
    assert train["x"].dtype == np.float32 and train["x"].shape == (1437, 64)
    assert train["labels"].dtype == np.int64 and train["labels"].shape == (1437,)
    assert test["x"].shape == (360, 64)
    assert 0.0 <= train["x"].min() and train["x"].max() <= 1.0


def test_digits_split_is_stratified():
    train, test = load_digits_split(test_fraction=0.2)
    counts = np.bincount(test["labels"], minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # ~20 % of each label's ~180 images


def test_digits_split_is_reproducible_per_seed_and_disjoint():
    a_train, a_test = load_digits_split(seed=0)
    b_train, _ = load_digits_split(seed=0)
    c_train, _ = load_digits_split(seed=1)
    assert np.array_equal(a_train["x"], b_train["x"])
    assert not np.array_equal(a_train["x"], c_train["x"])
    rows = {r.tobytes() for r in a_train["x"]}
    # digits has a few duplicate images; almost no test image may also be a training image
    assert sum(r.tobytes() in rows for r in a_test["x"]) <= 5


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_digits_split_rejects_a_test_fraction_outside_0_1(fraction):
    with pytest.raises(ConfigError, match=r"test fraction must be in \(0, 1\)"):
        load_digits_split(test_fraction=fraction)


def write_folder(root, clients=3, rows=5, features=4):
    rng = np.random.default_rng(0)
    for i in range(clients):
        save_npz(root / f"client-{i:04d}.npz", {"x": rng.random((rows + i, features), dtype=np.float32),
                                                 "labels": np.arange(rows + i, dtype=np.int64) % 3})
    save_npz(root / "test.npz", {"x": rng.random((7, features), dtype=np.float32),
                                 "labels": np.zeros(7, dtype=np.int64)})


def test_npz_folder_loads_clients_in_index_order(tmp_path):
    write_folder(tmp_path, clients=12)
    data = load_npz_folder(tmp_path)
    assert [p.name for p in data.client_files][:3] == ["client-0000.npz", "client-0001.npz", "client-0002.npz"]
    assert data.sizes == [5 + i for i in range(12)]
    assert data.test["x"].shape == (7, 4)


def test_npz_folder_without_client_files_names_what_it_expects(tmp_path):
    with pytest.raises(DataError, match="no client files; expected client-0000.npz"):
        load_npz_folder(tmp_path)


def test_npz_folder_that_does_not_exist(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_npz_folder(tmp_path / "nope")


def test_npz_folder_without_test_file(tmp_path):
    write_folder(tmp_path)
    (tmp_path / "test.npz").unlink()
    with pytest.raises(DataError, match="3 client files but no test.npz"):
        load_npz_folder(tmp_path)


def test_npz_folder_with_a_gap_in_client_numbers(tmp_path):
    write_folder(tmp_path, clients=4)
    (tmp_path / "client-0002.npz").unlink()
    with pytest.raises(DataError, match="client 2 is missing"):
        load_npz_folder(tmp_path)


def test_npz_file_lacking_an_array_names_it(tmp_path):
    write_folder(tmp_path)
    save_npz(tmp_path / "client-0001.npz", {"x": np.zeros((3, 4), np.float32)})
    with pytest.raises(DataError, match=r"client-0001.npz lacks array\(s\) \['labels'\]; expected \['x', 'labels'\]"):
        load_npz_folder(tmp_path)


def test_npz_files_must_agree_on_shapes_and_dtypes(tmp_path):
    write_folder(tmp_path)
    save_npz(tmp_path / "test.npz", {"x": np.zeros((3, 5), np.float32), "labels": np.zeros(3, np.int64)})
    with pytest.raises(DataError, match=r"test.npz does not match client-0000.npz: expected arrays "
                                        r"labels: int64\[N\], x: float32\[N,4\], found .*x: float32\[N,5\]"):
        load_npz_folder(tmp_path)


def test_npz_arrays_must_have_equal_row_counts(tmp_path):
    save_npz(tmp_path / "bad.npz", {"x": np.zeros((3, 4), np.float32), "labels": np.zeros(2, np.int64)})
    with pytest.raises(DataError, match="same number of rows, got x=3, labels=2"):
        read_npz(tmp_path / "bad.npz")


def test_a_file_that_is_not_npz(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="not a readable .npz"):
        read_npz(tmp_path / "junk.npz")


def test_npz_folder_accepts_other_input_names_when_asked(tmp_path):
    for name in ("client-0000.npz", "test.npz"):
        save_npz(tmp_path / name, {"pixels": np.zeros((2, 3), np.float32), "target": np.zeros(2, np.int64)})
    data = load_npz_folder(tmp_path, names=("pixels", "target"))
    assert set(data.clients[0]) == {"pixels", "target"}
