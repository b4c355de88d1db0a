"""edge_client.data: accepted data forms become checked batches in the model's input order."""

from __future__ import annotations

import numpy as np
import pytest

from fedort.common.errors import DataError
from fedort.ort.artifacts import TensorSpec
from fedort.common.client_data import read_npz
from fedort.edge_client.training.batches import ArrayData, IterableData, as_data, npz_validation_split

NAMES = ("x", "labels")
SPECS = {"x": TensorSpec("x", "float32", (None, 64)), "labels": TensorSpec("labels", "int64", (None,))}


def arrays(n: int = 10) -> dict[str, np.ndarray]:
    return {"x": np.arange(n * 64, dtype=np.float32).reshape(n, 64), "labels": np.arange(n, dtype=np.int64)}


def test_a_dict_becomes_arrays_in_input_order():
    data = as_data({"labels": arrays()["labels"], "x": arrays()["x"], "extra": np.zeros(3)}, NAMES, SPECS, "training data")
    assert isinstance(data, ArrayData) and len(data) == 10
    assert data.arrays[0].dtype == np.float32 and data.arrays[1].dtype == np.int64


def test_batches_cover_the_data_with_a_smaller_last_batch():
    data = as_data(arrays(10), NAMES, SPECS, "d")
    sizes = [b[0].shape[0] for b in data.batches(4)]
    assert sizes == [4, 4, 2] and data.num_batches(4) == 3
    np.testing.assert_array_equal(np.concatenate([b[1] for b in data.batches(4)]), np.arange(10))


def test_shuffled_batches_are_a_seeded_permutation_that_keeps_rows_together():
    data = as_data(arrays(10), NAMES, SPECS, "d")
    first = list(data.batches(3, np.random.default_rng(7)))
    again = list(data.batches(3, np.random.default_rng(7)))
    labels = np.concatenate([b[1] for b in first])
    assert sorted(labels) == list(range(10)) and list(labels) != list(range(10))
    np.testing.assert_array_equal(labels, np.concatenate([b[1] for b in again]))
    for x, y in first:
        np.testing.assert_array_equal(x[:, 0], y * 64)  # row i of x still pairs with label i


def test_missing_input_names_what_was_expected():
    with pytest.raises(DataError, match=r"training data lacks array\(s\) \['labels'\]; the model's inputs are "
                                        r"\['x', 'labels'\], found \['x', 'y'\]"):
        as_data({"x": arrays()["x"], "y": arrays()["labels"]}, NAMES, SPECS, "training data")


def test_wrong_dtype_names_expected_and_actual():
    bad = {**arrays(), "x": arrays()["x"].astype(np.float64)}
    with pytest.raises(DataError, match=r"input 'x' must be float32\[\?, 64\], got float64\[10, 64\] "
                                        r"\(convert with .astype\(np.float32\)\)"):
        as_data(bad, NAMES, SPECS, "training data")


def test_wrong_trailing_shape_names_expected_and_actual():
    bad = {**arrays(), "x": np.zeros((10, 8, 8), np.float32)}
    with pytest.raises(DataError, match=r"input 'x' must have shape float32\[\?, 64\], got float32\[10, 8, 8\]"):
        as_data(bad, NAMES, SPECS, "training data")


def test_arrays_of_different_lengths_are_rejected():
    bad = {**arrays(10), "labels": np.arange(9, dtype=np.int64)}
    with pytest.raises(DataError, match="same number of rows, got x=10, labels=9"):
        as_data(bad, NAMES, SPECS, "training data")


def test_empty_and_scalar_data_are_rejected():
    with pytest.raises(DataError, match="holds no examples"):
        as_data(arrays(0), NAMES, SPECS, "training data")
    with pytest.raises(DataError, match="is a scalar"):
        as_data({**arrays(), "labels": np.int64(3)}, NAMES, SPECS, "training data")


def test_a_bare_array_or_other_object_is_rejected_with_the_accepted_forms():
    with pytest.raises(DataError, match="got a single array"):
        as_data(arrays()["x"], NAMES, SPECS, "training data")
    with pytest.raises(DataError, match="expected a dict of arrays, a .npz path or an iterable"):
        as_data(42, NAMES, SPECS, "training data")


def test_npz_arrays_are_loaded_by_input_name(tmp_path):
    np.savez(tmp_path / "c.npz", **arrays(6))
    data = as_data(tmp_path / "c.npz", NAMES, SPECS, "training data")
    assert isinstance(data, ArrayData) and len(data) == 6
    assert as_data(str(tmp_path / "c.npz"), NAMES, SPECS, "training data").arrays[1].tolist() == list(range(6))


def test_npz_validation_split_is_the_val_prefixed_arrays(tmp_path):
    val = arrays(4)
    np.savez(tmp_path / "c.npz", **arrays(6), val_x=val["x"], val_labels=val["labels"])
    split = npz_validation_split(tmp_path / "c.npz", NAMES, SPECS)
    assert len(split) == 4
    assert as_data(tmp_path / "c.npz", NAMES, SPECS, "v", prefix="val_").arrays[0].shape == (4, 64)


def test_npz_without_validation_split(tmp_path):
    np.savez(tmp_path / "c.npz", **arrays(6))
    assert npz_validation_split(tmp_path / "c.npz", NAMES, SPECS) is None
    assert len(as_data(tmp_path / "c.npz", NAMES, SPECS, "v", prefix="val_")) == 6  # falls back to the plain names


def test_npz_with_half_a_validation_split_is_rejected(tmp_path):
    np.savez(tmp_path / "c.npz", **arrays(6), val_x=arrays(2)["x"])
    with pytest.raises(DataError, match=r"lacks array\(s\) \['val_labels'\]"):
        npz_validation_split(tmp_path / "c.npz", NAMES, SPECS)


def test_npz_missing_arrays_missing_file_and_garbage(tmp_path):
    np.savez(tmp_path / "c.npz", x=arrays()["x"])
    with pytest.raises(DataError, match=r"lacks array\(s\) \['labels'\]; expected \['x', 'labels'\], found \['x'\]"):
        read_npz(tmp_path / "c.npz", NAMES)
    with pytest.raises(DataError, match="data file not found"):
        read_npz(tmp_path / "nope.npz", NAMES)
    (tmp_path / "bad.npz").write_bytes(b"garbage")
    with pytest.raises(DataError, match="not a readable .npz"):
        read_npz(tmp_path / "bad.npz", NAMES)


def test_an_iterable_of_batch_tuples_or_dicts_is_used_as_given():
    a = arrays(6)
    batches = [(a["x"][:4], a["labels"][:4]), {"labels": a["labels"][4:], "x": a["x"][4:]}]
    data = as_data(batches, NAMES, SPECS, "training data")
    assert isinstance(data, IterableData) and data.num_batches(32) == 2
    out = list(data.batches(32, np.random.default_rng(0)))  # no shuffling of user batches
    assert [b[1].tolist() for b in out] == [[0, 1, 2, 3], [4, 5]]


def test_the_first_batch_of_an_iterable_is_checked():
    a = arrays(4)
    data = as_data([(a["x"].astype(np.float64), a["labels"])], NAMES, SPECS, "training data")
    with pytest.raises(DataError, match="input 'x' must be float32"):
        list(data.batches(32))
    data = as_data([(a["x"],)], NAMES, SPECS, "training data")
    with pytest.raises(DataError, match=r"takes 2 inputs \['x', 'labels'\], a batch has 1 arrays"):
        list(data.batches(32))
    data = as_data(["not a batch"], NAMES, SPECS, "training data")
    with pytest.raises(DataError, match="each batch must be a tuple"):
        list(data.batches(32))


def test_a_one_shot_iterator_cannot_serve_a_second_epoch():
    a = arrays(4)
    data = as_data(iter([(a["x"], a["labels"])]), NAMES, SPECS, "training data")
    assert data.num_batches(32) is None
    assert len(list(data.batches(32))) == 1
    with pytest.raises(DataError, match="one-shot iterator"):
        list(data.batches(32))
