"""edge_client.client_data: a device's .npz checked before training, with messages that say what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from fedort.common.errors import DataError
from fedort.ort.artifacts import TensorSpec
from fedort.common.client_data import ClientData

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
    with pytest.raises(DataError, match="same number of rows, got x=10, labels=9"):
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
    with pytest.raises(DataError, match=r"lacks array\(s\) \['labels'\]; the model's inputs are \['x', 'labels'\]"):
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


# ---- class labels within the model's class count (issue 9: labels 10-19 trained with loss 47) ----

def test_a_label_beyond_the_class_count_names_file_array_value_and_range(tmp_path):
    np.savez(tmp_path / "c.npz", x=np.zeros((10, 64), np.float32), labels=np.arange(10, 20, dtype=np.int64))
    data = ClientData.load(tmp_path / "c.npz")
    with pytest.raises(DataError, match=r"c\.npz: array 'labels' holds label 19 \(10 of 10 labels out of range, "
                                        r"from 10 to 19\); the model has 10 classes, so labels must be in 0\.\.9"):
        data.validate(INPUTS, num_classes=10)


def test_a_negative_label_is_refused():
    data = ClientData.from_arrays(arrays(5, labels=np.array([0, 1, -1, 2, 3], np.int64)))
    with pytest.raises(DataError, match=r"'labels' holds label -1 .* labels must be in 0\.\.9"):
        data.validate(INPUTS, num_classes=10)


def test_validation_labels_are_range_checked_too():
    data = ClientData.from_arrays(arrays(5), val=arrays(2, labels=np.array([3, 12], np.int64)))
    with pytest.raises(DataError, match=r"'val_labels' holds label 12"):
        data.validate(INPUTS, num_classes=10)


def test_labels_in_range_pass_and_an_unknown_class_count_checks_no_range():
    data = ClientData.from_arrays(arrays(10, labels=np.arange(10, dtype=np.int64)))
    data.validate(INPUTS, num_classes=10)
    ClientData.from_arrays(arrays(3, labels=np.full(3, 99, np.int64))).validate(INPUTS)


def test_the_trainer_refuses_out_of_range_labels_before_any_step(tmp_path, mlp_artifacts, digits_train):
    from fedort.edge_client.training.module import TrainingModule
    from fedort.ort.session import TrainingSession
    from fedort.edge_client.training.trainer import Trainer

    path = tmp_path / "shifted.npz"
    np.savez(path, x=digits_train["x"][:64], labels=digits_train["labels"][:64] + 10)
    session = TrainingSession.from_artifacts(mlp_artifacts)
    before = np.array(session.to_buffer(), copy=True)
    with pytest.raises(DataError, match=r"shifted\.npz\): array 'labels' holds label 19 .*must be in 0\.\.9"):
        Trainer(max_epochs=1, batch_size=16, progress=False).fit(TrainingModule(session, lr=0.1), path)
    np.testing.assert_array_equal(session.to_buffer(), before)  # nothing was trained
