"""edge_client.client_data: a device's .npz checked before training, with messages that say what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from fedort.protos.errors import DataError
from fedort.edge_client.artifacts import TensorSpec
from fedort.edge_client.client_data import ClientData

INPUTS = (TensorSpec("x", "float32", (None, 64)), TensorSpec("labels", "int64", (None,)))


def arrays(n: int = 10, **over):
    out = {"x": np.zeros((n, 64), np.float32), "labels": np.zeros(n, np.int64)}
    out.update(over)
    return out


def test_val_prefixed_arrays_become_the_validation_split(tmp_path):
    np.savez(tmp_path / "c.npz", **arrays(10), val_x=np.ones((3, 64), np.float32), val_labels=np.ones(3, np.int64))
    data = ClientData.load(tmp_path / "c.npz")
    assert data.num_examples == 10 and data.num_val_examples == 3
    data.validate(INPUTS)
    assert list(data.arrays_for(INPUTS, "val")) == ["x", "labels"]


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(DataError, match="data file not found: .*nope.npz"):
        ClientData.load(tmp_path / "nope.npz")


def test_a_file_that_is_not_an_npz_is_refused(tmp_path):
    (tmp_path / "c.npz").write_bytes(b"not a zip file")
    with pytest.raises(DataError, match="not a readable .npz"):
        ClientData.load(tmp_path / "c.npz")


def test_arrays_of_different_lengths_are_refused():
    with pytest.raises(DataError, match="same number of rows.*'x': 10, 'labels': 9"):
        ClientData.from_arrays(arrays(10, labels=np.zeros(9, np.int64)))


def test_nan_features_are_refused():
    x = np.zeros((4, 64), np.float32)
    x[2, 5] = np.nan
    with pytest.raises(DataError, match="'x' contains NaN"):
        ClientData.from_arrays(arrays(4, x=x))


def test_an_empty_data_set_is_refused():
    with pytest.raises(DataError, match="no rows"):
        ClientData.from_arrays(arrays(0))


def test_a_validation_split_must_have_the_same_arrays():
    with pytest.raises(DataError, match="validation arrays"):
        ClientData.from_arrays(arrays(5), val={"x": np.zeros((2, 64), np.float32)})


def test_missing_model_inputs_are_named():
    data = ClientData.from_arrays({"x": np.zeros((5, 64), np.float32)})
    with pytest.raises(DataError, match=r"inputs are \['x', 'labels'\]; missing array\(s\) \['labels'\]"):
        data.validate(INPUTS)


def test_a_wrong_dtype_says_what_the_model_expects():
    data = ClientData.from_arrays(arrays(5, labels=np.zeros(5, np.int32)))
    with pytest.raises(DataError, match=r"'labels' must be int64\[\?\], got int32\[5\]"):
        data.validate(INPUTS)


def test_a_wrong_trailing_shape_is_refused_whatever_the_row_count():
    data = ClientData.from_arrays(arrays(5, x=np.zeros((5, 63), np.float32)))
    with pytest.raises(DataError, match=r"'x' must have shape float32\[\?, 64\], got float32\[5, 63\]"):
        data.validate(INPUTS)


def test_the_validation_split_is_checked_too():
    data = ClientData.from_arrays(arrays(5), val=arrays(2, x=np.zeros((2, 64), np.float64)))
    with pytest.raises(DataError, match="'val_x' must be float32"):
        data.validate(INPUTS)
