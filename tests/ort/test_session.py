"""TrainingSession: every method over real ORT artifacts of the built-in MLP."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from fedort.common.errors import ArtifactError, ConfigError, DataError, TrainingError, VectorError
from fedort.ort.artifacts import CHECKPOINT, EVAL_MODEL, OPTIMIZER_MODEL, TRAINING_MODEL, build_artifacts
from fedort.ort.models import mlp
from fedort.edge_client.training.module import LinearWarmupDecay
from fedort.ort.session import SessionConfig, TrainingSession


@pytest.fixture
def session(mlp_artifacts) -> TrainingSession:
    return TrainingSession.from_artifacts(mlp_artifacts)


def step(s: TrainingSession, x, y) -> None:
    s.train_step(x, y)
    s.optimizer_step()
    s.lazy_reset_grad()


# ---- construction -------------------------------------------------------------------------------

def test_from_artifacts_reads_names_and_manifest(session):
    assert session.train_input_names == ("x", "labels")
    assert session.eval_input_names == ("x", "labels")
    assert session.train_output_names[1:] == ("logits",)
    assert "logits" in session.eval_output_names
    assert session.manifest is not None and session.manifest.parameter_count == 9610
    specs = session.input_specs
    assert (specs["x"].dtype, specs["x"].shape) == ("float32", (None, 64))
    assert (specs["labels"].dtype, specs["labels"].shape) == ("int64", (None,))


def test_missing_artifacts_folder_is_an_artifact_error(tmp_path):
    with pytest.raises(ArtifactError, match="artifacts folder not found"):
        TrainingSession.from_artifacts(tmp_path / "nope")


def test_missing_checkpoint_is_an_artifact_error(mlp_artifacts, tmp_path):
    with pytest.raises(ArtifactError, match="checkpoint not found"):
        TrainingSession(tmp_path / "checkpoint", mlp_artifacts / TRAINING_MODEL)


def test_models_may_be_given_as_bytes(mlp_artifacts, batch):
    s = TrainingSession(mlp_artifacts / CHECKPOINT, (mlp_artifacts / TRAINING_MODEL).read_bytes(),
                        (mlp_artifacts / EVAL_MODEL).read_bytes(), (mlp_artifacts / OPTIMIZER_MODEL).read_bytes())
    before = s.to_buffer().copy()
    step(s, *batch)
    assert not np.array_equal(before, s.to_buffer())
    assert set(s.eval_step(*batch)) >= {"logits"}


def test_without_a_manifest_input_specs_come_from_the_eval_model(mlp_artifacts):
    s = TrainingSession(mlp_artifacts / CHECKPOINT, mlp_artifacts / TRAINING_MODEL, mlp_artifacts / EVAL_MODEL,
                        mlp_artifacts / OPTIMIZER_MODEL)
    assert s.manifest is None
    assert s.input_specs["x"].shape == (None, 64)


def test_a_provider_that_cannot_train_is_a_config_error(mlp_artifacts):
    with pytest.raises(ConfigError, match="TensorrtExecutionProvider"):
        TrainingSession.from_artifacts(mlp_artifacts, config=SessionConfig(providers=("TensorrtExecutionProvider",)))


def test_providers_are_tried_in_order_with_options(mlp_artifacts):
    config = SessionConfig(providers=(("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"),
                           intra_op_threads=1)
    assert config.device() == "cpu"
    assert TrainingSession.from_artifacts(mlp_artifacts, config=config).parameter_count() == 9610


# ---- steps --------------------------------------------------------------------------------------

def test_train_step_returns_the_loss_and_logits_but_does_not_change_parameters(session, batch):
    before = session.to_buffer().copy()
    out = session.train_step(*batch)
    assert out[session.train_output_names[0]].shape == ()
    assert out["logits"].shape == (32, 10)
    assert np.array_equal(before, session.to_buffer())


def test_optimizer_step_changes_parameters_and_lowers_the_loss(session, batch):
    loss0 = float(session.eval_step(*batch)[session.eval_output_names[0]])
    for _ in range(20):
        step(session, *batch)
    assert float(session.eval_step(*batch)[session.eval_output_names[0]]) < loss0


def test_eval_step_matches_the_forward_pass_of_train_step(session, batch):
    train = session.train_step(*batch)
    evaluation = session.eval_step(*batch)
    np.testing.assert_allclose(evaluation["logits"], train["logits"], rtol=1e-6)
    session.lazy_reset_grad()


def test_eval_step_without_eval_model_is_an_artifact_error(mlp_artifacts, batch):
    s = TrainingSession(mlp_artifacts / CHECKPOINT, mlp_artifacts / TRAINING_MODEL, None, mlp_artifacts / OPTIMIZER_MODEL)
    with pytest.raises(ArtifactError, match="eval model"):
        s.eval_step(*batch)


def test_optimizer_step_without_optimizer_model_is_an_artifact_error(mlp_artifacts, batch):
    s = TrainingSession(mlp_artifacts / CHECKPOINT, mlp_artifacts / TRAINING_MODEL, mlp_artifacts / EVAL_MODEL)
    s.train_step(*batch)
    with pytest.raises(ArtifactError, match="optimizer model"):
        s.optimizer_step()


def test_lazy_reset_grad_discards_earlier_gradients(sgd_artifacts, digits_train):
    x, y = digits_train["x"], digits_train["labels"]
    a, b = TrainingSession.from_artifacts(sgd_artifacts), TrainingSession.from_artifacts(sgd_artifacts)
    a.learning_rate = b.learning_rate = 0.1
    a.train_step(x[:32], y[:32])
    a.lazy_reset_grad()
    a.train_step(x[32:64], y[32:64])
    a.optimizer_step()
    b.train_step(x[32:64], y[32:64])
    b.optimizer_step()
    np.testing.assert_array_equal(a.to_buffer(), b.to_buffer())


def test_gradients_accumulate_until_reset_two_half_batches_with_half_lr_equal_one_full_batch(sgd_artifacts, digits_train):
    # The built-in cross-entropy is a mean over the batch, so the summed gradients of two
    # 16-example halves are twice the 32-example gradient: lr/2 makes SGD's update identical.
    x, y = digits_train["x"][:32], digits_train["labels"][:32]
    full, halves = TrainingSession.from_artifacts(sgd_artifacts), TrainingSession.from_artifacts(sgd_artifacts)
    full.learning_rate, halves.learning_rate = 0.2, 0.1
    full.train_step(x, y)
    full.optimizer_step()
    halves.train_step(x[:16], y[:16])
    halves.train_step(x[16:], y[16:])
    halves.optimizer_step()
    start = TrainingSession.from_artifacts(sgd_artifacts).to_buffer()
    assert np.abs(full.to_buffer() - start).max() > 1e-3  # the step is real
    np.testing.assert_allclose(halves.to_buffer(), full.to_buffer(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("inputs, message", [
    (lambda x, y: (x,), r"train_step takes 2 inputs \['x', 'labels'\], got 1"),
    (lambda x, y: (x, y, y), r"train_step takes 2 inputs \['x', 'labels'\], got 3"),
    (lambda x, y: (x.astype(np.float64), y), r"input 'x' must be float32, got float64"),
    (lambda x, y: (x, y.astype(np.int32)), r"input 'labels' must be int64, got int32"),
    (lambda x, y: (x[:, :60], y), r"input 'x' must have shape \[\?, 64\], got \[32, 60\]"),
    (lambda x, y: (x.reshape(32, 8, 8), y), r"input 'x' must have shape \[\?, 64\], got \[32, 8, 8\]"),
])
def test_bad_inputs_name_what_was_expected(session, batch, inputs, message):
    with pytest.raises(DataError, match=message):
        session.train_step(*inputs(*batch))


def test_eval_step_checks_inputs_too(session, batch):
    with pytest.raises(DataError, match="eval_step takes 2 inputs"):
        session.eval_step(batch[0])


def test_non_contiguous_and_list_inputs_are_accepted(session, batch):
    x, y = batch
    xf = np.asfortranarray(x)
    out = session.eval_step(xf, y.tolist())
    np.testing.assert_allclose(out["logits"], session.eval_step(x, y)["logits"], rtol=1e-6)


# ---- learning rate ----------------------------------------------------------------------------

def test_learning_rate_can_be_read_and_set(session):
    session.learning_rate = 0.05
    assert session.learning_rate == pytest.approx(0.05)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_a_bad_learning_rate_is_a_config_error(session, bad):
    with pytest.raises(ConfigError, match="learning rate"):
        session.learning_rate = bad


def test_linear_schedule_warms_up_then_decays_as_documented(session, batch):
    # ORT 1.19.2's wrapper swaps (warmup, total); the session compensates, so these are the
    # values of the documented formula, indexed by the optimizer's step count.
    warmup, total, lr = 3, 10, 1.0
    session.register_linear_lr_scheduler(warmup, total, lr)
    plan = LinearWarmupDecay(lr, warmup, total)
    seen = [session.learning_rate]
    for _ in range(12):
        step(session, *batch)
        session.scheduler_step()
        seen.append(session.learning_rate)
    expected = [plan.lr_at(k) for k in range(13)]
    assert expected[:5] == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0, 6 / 7])
    np.testing.assert_allclose(seen, expected, atol=1e-6)


def test_ort_1_19_2_scheduler_wrapper_swaps_warmup_and_total(mlp_artifacts, batch):
    # The upstream bug session.register_linear_lr_scheduler compensates for. If this fails after
    # an ORT upgrade, the wrapper was fixed: drop the swap in session.py.
    import os

    from fedort.ort import _training_api as _ort

    api = _ort.training_api()
    state = api.CheckpointState.load_checkpoint(os.fspath(mlp_artifacts / CHECKPOINT))
    module = api.Module(os.fspath(mlp_artifacts / TRAINING_MODEL), state, None)
    optimizer = api.Optimizer(os.fspath(mlp_artifacts / OPTIMIZER_MODEL), module)
    scheduler = api.LinearLRScheduler(optimizer, 3, 10, 1.0)  # meant: warmup 3, total 10
    module(*batch)
    optimizer.step()
    scheduler.step()
    assert optimizer.get_learning_rate() == pytest.approx(0.1)  # got: warmup over 10 steps


def test_scheduler_step_before_registering_is_a_config_error(session):
    with pytest.raises(ConfigError, match="before register_linear_lr_scheduler"):
        session.scheduler_step()


@pytest.mark.parametrize("warmup, total", [(5, 3), (-1, 3), (0, 0)])
def test_bad_schedule_is_a_config_error(session, warmup, total):
    with pytest.raises(ConfigError, match="warmup_step_count"):
        session.register_linear_lr_scheduler(warmup, total, 0.1)


def test_setting_a_learning_rate_replaces_the_schedule(session):
    session.register_linear_lr_scheduler(2, 10, 1.0)
    session.learning_rate = 0.03
    with pytest.raises(ConfigError):
        session.scheduler_step()
    session.reset_optimizer_state()
    assert session.learning_rate == pytest.approx(0.03)


# ---- parameters -------------------------------------------------------------------------------

def test_parameter_count_counts_trainable_and_all(session, tmp_path):
    assert session.parameter_count() == session.parameter_count(trainable_only=False) == 64 * 128 + 128 + 128 * 10 + 10
    build_artifacts(mlp(), tmp_path, frozen=["fc1.weight", "fc1.bias"])
    frozen = TrainingSession.from_artifacts(tmp_path)
    assert frozen.parameter_count() == 128 * 10 + 10
    assert frozen.parameter_count(trainable_only=False) == 9610


def test_to_buffer_is_the_trainable_parameters_in_training_model_order(session):
    initial = {t.name: numpy_helper.to_array(t) for t in mlp().graph.initializer}
    expected = np.concatenate([initial[n].ravel() for n in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")])
    vector = session.to_buffer()
    assert vector.dtype == np.float32 and vector.shape == (9610,)
    np.testing.assert_array_equal(vector, expected)


def test_to_buffer_returns_an_array_of_the_caller_s_own(session):
    first = session.to_buffer()
    kept = first.copy()
    first[:] = 7.0                       # writing into it changes neither the parameters nor the next copy
    second = session.to_buffer()
    np.testing.assert_array_equal(second, kept)
    assert not np.shares_memory(first, second) and second.flags.writeable and second.flags.c_contiguous
    assert session.to_buffer(trainable_only=False).shape == (session.parameter_count(trainable_only=False),)


def test_from_buffer_then_to_buffer_round_trips(session, batch):
    vector = np.random.default_rng(1).standard_normal(9610).astype(np.float32)
    before = session.eval_step(*batch)["logits"]
    session.from_buffer(vector)
    np.testing.assert_array_equal(session.to_buffer(), vector)
    assert not np.allclose(session.eval_step(*batch)["logits"], before)


def test_from_buffer_of_all_parameters(mlp_artifacts, tmp_path):
    build_artifacts(mlp(), tmp_path, frozen=["fc1.bias"])
    s = TrainingSession.from_artifacts(tmp_path)
    everything = np.arange(9610, dtype=np.float32)
    s.from_buffer(everything, trainable_only=False)
    np.testing.assert_array_equal(s.to_buffer(trainable_only=False), everything)
    assert s.to_buffer().shape == (9610 - 128,)


@pytest.mark.parametrize("vector, message", [
    (np.zeros(9609, np.float32), "must have 9610 elements"),
    (np.zeros(9610, np.float64), "must be float32, got float64"),
    (np.zeros((2, 4805), np.float32), "must be 1-D"),
    ([0.0] * 9610, "takes a numpy float32 array, got list"),
])
def test_bad_vectors_are_vector_errors(session, vector, message):
    with pytest.raises(VectorError, match=message):
        session.from_buffer(vector)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_from_buffer_refuses_a_non_finite_vector_and_keeps_the_parameters(session, bad):
    before = session.to_buffer().copy()
    vector = before.copy()
    vector[17] = bad
    with pytest.raises(VectorError, match="1 non-finite values"):
        session.from_buffer(vector)
    np.testing.assert_array_equal(session.to_buffer(), before)


_ORDER_SCRIPT = """
import hashlib, sys
from fedort.ort.session import TrainingSession
print(hashlib.sha256(TrainingSession.from_artifacts(sys.argv[1]).to_buffer().tobytes()).hexdigest())
"""


@pytest.mark.slow
def test_vector_order_is_the_same_in_another_process(mlp_artifacts, session):
    here = hashlib.sha256(session.to_buffer().tobytes()).hexdigest()
    out = subprocess.run([sys.executable, "-c", _ORDER_SCRIPT, str(mlp_artifacts)], capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.strip() == here


# ---- persistence ------------------------------------------------------------------------------

def test_exported_model_matches_eval_step_in_plain_onnxruntime(session, batch, tmp_path):
    for _ in range(5):
        step(session, *batch)
    path = session.export_model_for_inference(tmp_path / "missing" / "folder" / "model.onnx")
    assert path.is_file()
    infer = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in infer.get_inputs()] == ["x"]
    assert [o.name for o in infer.get_outputs()] == ["logits"]
    (logits,) = infer.run(None, {"x": batch[0]})
    np.testing.assert_allclose(logits, session.eval_step(*batch)["logits"], rtol=1e-5, atol=1e-6)


def test_export_without_eval_model_is_an_artifact_error(mlp_artifacts, tmp_path):
    s = TrainingSession(mlp_artifacts / CHECKPOINT, mlp_artifacts / TRAINING_MODEL, None, mlp_artifacts / OPTIMIZER_MODEL)
    with pytest.raises(ArtifactError, match="needs the eval model"):
        s.export_model_for_inference(tmp_path / "m.onnx", ["logits"])


def test_export_without_output_names_or_manifest_is_a_config_error(mlp_artifacts, tmp_path):
    s = TrainingSession(mlp_artifacts / CHECKPOINT, mlp_artifacts / TRAINING_MODEL, mlp_artifacts / EVAL_MODEL)
    with pytest.raises(ConfigError, match="output names"):
        s.export_model_for_inference(tmp_path / "m.onnx")


def test_saved_checkpoint_reopens_with_the_same_parameters(session, batch, mlp_artifacts, tmp_path):
    step(session, *batch)
    session.save_checkpoint(tmp_path / "ckpt" / "checkpoint")
    reopened = TrainingSession(tmp_path / "ckpt" / "checkpoint", mlp_artifacts / TRAINING_MODEL,
                               mlp_artifacts / EVAL_MODEL, mlp_artifacts / OPTIMIZER_MODEL)
    np.testing.assert_array_equal(reopened.to_buffer(), session.to_buffer())


def test_reset_optimizer_state_equals_a_fresh_session(mlp_artifacts, digits_train):
    x, y = digits_train["x"], digits_train["labels"]
    used = TrainingSession.from_artifacts(mlp_artifacts)
    used.learning_rate = 0.01
    for i in range(5):
        step(used, x[i * 32:(i + 1) * 32], y[i * 32:(i + 1) * 32])
    vector = used.to_buffer().copy()
    stale = TrainingSession.from_artifacts(mlp_artifacts)  # same parameters, AdamW moments kept
    stale.learning_rate = 0.01
    for i in range(5):
        step(stale, x[i * 32:(i + 1) * 32], y[i * 32:(i + 1) * 32])

    used.reset_optimizer_state()
    fresh = TrainingSession.from_artifacts(mlp_artifacts)
    fresh.from_buffer(vector)
    fresh.learning_rate = 0.01
    assert used.learning_rate == pytest.approx(0.01)
    for s in (used, fresh, stale):
        for i in range(5, 8):
            step(s, x[i * 32:(i + 1) * 32], y[i * 32:(i + 1) * 32])
    np.testing.assert_array_equal(used.to_buffer(), fresh.to_buffer())
    assert not np.array_equal(stale.to_buffer(), fresh.to_buffer())  # the moments did matter


# ---- every failure inside ONNX Runtime surfaces as TrainingError, naming the action -------------

def test_an_ort_failure_in_train_step_is_a_training_error(session, batch):
    x, labels = batch
    with pytest.raises(TrainingError, match="train_step failed in ONNX Runtime"):
        session.train_step(x[:, :10].copy(), labels, check=False)      # wrong width, unchecked: ORT refuses


def test_an_ort_failure_in_export_is_a_training_error_naming_the_outputs(session, tmp_path):
    with pytest.raises(TrainingError, match=r"export to .*model.onnx with outputs \['no_such_output'\] failed"):
        session.export_model_for_inference(tmp_path / "model.onnx", ["no_such_output"])
    assert not list(tmp_path.glob("*.onnx*"))                              # no temp file left behind


def test_an_ort_failure_in_save_checkpoint_is_a_training_error(session, tmp_path):
    (tmp_path / "taken").mkdir()                                           # a folder where the file should go
    with pytest.raises(TrainingError, match="save_checkpoint to .*taken failed in ONNX Runtime"):
        session.save_checkpoint(tmp_path / "taken")
