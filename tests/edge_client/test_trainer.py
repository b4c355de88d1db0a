"""Trainer: the fit/validate/test/predict loops over real ORT sessions and the digits data."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from fedort.common.errors import ConfigError, DataError
from fedort.edge_client.training.module import LinearWarmupDecay, TrainingModule
from fedort.ort.session import TrainingSession
from fedort.edge_client.training.trainer import Callback, RunResult, Trainer


def small(data: dict, n: int) -> dict:
    return {k: v[:n] for k, v in data.items()}


@pytest.fixture
def session(mlp_artifacts) -> TrainingSession:
    return TrainingSession.from_artifacts(mlp_artifacts)


# ---- what fit does ----------------------------------------------------------------------------

def test_central_mlp_reaches_95_percent_on_held_out_digits(session, digits_train, digits_test):
    module = TrainingModule(session, lr=0.01)
    fit = Trainer(max_epochs=10, batch_size=32, seed=0).fit(module, digits_train)
    test = Trainer(batch_size=256).test(module, digits_test)
    assert fit.metrics["train_loss"] < 0.1
    assert test.metrics["test_accuracy"] >= 0.95
    assert test.num_examples == len(digits_test["labels"])


@pytest.mark.slow
def test_the_builtin_cnn_trains_too(cnn_artifacts, digits_train, digits_test):
    module = TrainingModule(TrainingSession.from_artifacts(cnn_artifacts), lr=0.01)
    before = Trainer(batch_size=256).test(module, digits_test).metrics["test_accuracy"]
    Trainer(max_epochs=2, batch_size=32).fit(module, digits_train)
    after = Trainer(batch_size=256).test(module, digits_test).metrics["test_accuracy"]
    assert before < 0.5 < 0.85 <= after


@pytest.mark.slow
def test_fit_result_counts_examples_steps_epochs_and_keeps_history(session, digits_train, digits_test):
    result = Trainer(max_epochs=3, batch_size=50).fit(TrainingModule(session), small(digits_train, 120), digits_test)
    assert isinstance(result, RunResult)
    assert (result.num_examples, result.steps, result.epochs, result.batches) == (120, 9, 3, 9)
    assert len(result.history) == 3
    assert set(result.metrics) == {"train_loss", "val_loss", "val_accuracy"} == set(result.history[-1])
    assert result.sync_dist == {"train_loss", "val_loss", "val_accuracy"}
    assert result.metrics == result.history[-1]


@pytest.mark.slow
def test_fit_equals_the_same_steps_written_by_hand(sgd_artifacts, digits_train):
    data = small(digits_train, 100)
    ours = TrainingSession.from_artifacts(sgd_artifacts)
    Trainer(max_epochs=2, batch_size=32, seed=5).fit(TrainingModule(ours, lr=0.1), data)

    by_hand = TrainingSession.from_artifacts(sgd_artifacts)
    by_hand.learning_rate = 0.1
    rng = np.random.default_rng(5)
    for _ in range(2):
        perm = rng.permutation(100)
        x, y = data["x"][perm], data["labels"][perm]
        for i in range(0, 100, 32):
            by_hand.train_step(x[i:i + 32], y[i:i + 32])
            by_hand.optimizer_step()
            by_hand.lazy_reset_grad()
    np.testing.assert_array_equal(ours.to_buffer(), by_hand.to_buffer())


def _fit_vector(artifacts, data, **trainer_kwargs) -> np.ndarray:
    session = TrainingSession.from_artifacts(artifacts)
    lr = trainer_kwargs.pop("lr", 0.05)
    Trainer(**trainer_kwargs).fit(TrainingModule(session, lr=lr), data)
    return session.to_buffer().copy()


@pytest.mark.slow
def test_shuffling_is_reproducible_from_the_seed(sgd_artifacts, digits_train):
    data = small(digits_train, 96)
    a = _fit_vector(sgd_artifacts, data, seed=1)
    assert np.array_equal(a, _fit_vector(sgd_artifacts, data, seed=1))
    assert not np.array_equal(a, _fit_vector(sgd_artifacts, data, seed=2))
    assert not np.array_equal(a, _fit_vector(sgd_artifacts, data, shuffle=False))


@pytest.mark.slow
def test_gradient_accumulation_of_k_batches_with_lr_over_k_equals_one_k_times_larger_batch_for_sgd(
        sgd_artifacts, digits_train):
    # ORT sums gradients until lazy_reset_grad; the built-in loss is a batch mean. Both runs
    # draw the same permutation per epoch (same seed, same n), so batch pairs make the big batches.
    data = small(digits_train, 128)
    accumulated = _fit_vector(sgd_artifacts, data, lr=0.05, batch_size=16, accumulate_grad_batches=2, max_epochs=2)
    one_batch = _fit_vector(sgd_artifacts, data, lr=0.1, batch_size=32, max_epochs=2)
    start = TrainingSession.from_artifacts(sgd_artifacts).to_buffer()
    assert np.abs(one_batch - start).max() > 1e-2
    np.testing.assert_allclose(accumulated, one_batch, rtol=0, atol=2e-6)


def test_a_partial_accumulation_at_epoch_end_still_steps(session, digits_train):
    result = Trainer(max_epochs=2, batch_size=16, accumulate_grad_batches=2).fit(TrainingModule(session),
                                                                                small(digits_train, 48))
    assert result.batches == 6 and result.steps == 4  # per epoch: (2 batches) + (1 leftover)


def test_max_steps_stops_mid_epoch(session, digits_train):
    result = Trainer(max_epochs=None, max_steps=5, batch_size=32).fit(TrainingModule(session), small(digits_train, 320))
    assert (result.steps, result.epochs, result.num_examples) == (5, 1, 160)


def test_max_steps_over_several_epochs(session, digits_train):
    result = Trainer(max_epochs=10, max_steps=7, batch_size=32).fit(TrainingModule(session), small(digits_train, 96))
    assert (result.steps, result.epochs, result.num_examples) == (7, 3, 96)


def test_a_linear_warmup_decay_plan_runs_on_the_session_scheduler(session, digits_train):
    class Scheduled(TrainingModule):
        def configure_optimizers(self):
            return LinearWarmupDecay(self.lr, warmup_steps=2)  # total: the steps of the fit

    seen = []

    class Watch(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            seen.append(module.session.learning_rate)

    Trainer(max_epochs=2, batch_size=32, callbacks=[Watch()]).fit(Scheduled(session, lr=0.1), small(digits_train, 96))
    expected = [LinearWarmupDecay(0.1, 2, 6).lr_at(k) for k in range(1, 7)]  # rate after each of the 6 steps
    np.testing.assert_allclose(seen, expected, atol=1e-7)
    assert session.learning_rate == 0.0


def test_a_schedule_needs_a_known_number_of_steps(session, digits_train):
    class Scheduled(TrainingModule):
        def configure_optimizers(self):
            return LinearWarmupDecay(self.lr, warmup_steps=1)

    one_shot = iter([(digits_train["x"][:8], digits_train["labels"][:8])])
    with pytest.raises(ConfigError, match="needs data of known length"):
        Trainer().fit(Scheduled(session), one_shot)


def test_configure_optimizers_must_return_a_plan(session, digits_train):
    class Wrong(TrainingModule):
        def configure_optimizers(self):
            return "adam"

    with pytest.raises(ConfigError, match="must return ConstantLR or LinearWarmupDecay"):
        Trainer().fit(Wrong(session), small(digits_train, 8))


def test_the_module_lr_is_applied_at_fit_start(session, digits_train):
    module = TrainingModule(session, lr=0.2)
    Trainer().fit(module, small(digits_train, 8))
    assert session.learning_rate == pytest.approx(0.2)


# ---- hooks and callbacks ----------------------------------------------------------------------

class Recorder(Callback):
    def __init__(self):
        self.calls = []

    def on_fit_start(self, trainer, module):
        self.calls.append("fit_start")

    def on_train_epoch_start(self, trainer, module):
        self.calls.append(f"epoch_start {trainer.current_epoch}")

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.calls.append(f"batch {batch_idx}")

    def on_validation_epoch_end(self, trainer, module):
        self.calls.append(f"val_end {sorted(trainer.callback_metrics)}")

    def on_train_epoch_end(self, trainer, module):
        self.calls.append(f"epoch_end {trainer.current_epoch} {sorted(trainer.callback_metrics)}")

    def on_fit_end(self, trainer, module):
        self.calls.append("fit_end")


def test_callbacks_see_the_loop_in_order(session, digits_train):
    rec = Recorder()
    Trainer(max_epochs=2, batch_size=4, callbacks=[rec]).fit(TrainingModule(session), small(digits_train, 8),
                                                             small(digits_train, 4))
    metrics = "['train_loss', 'val_accuracy', 'val_loss']"

    def epoch(e):
        return [f"epoch_start {e}", "batch 0", "batch 1", f"val_end {metrics}", f"epoch_end {e} {metrics}"]

    assert rec.calls == ["fit_start", *epoch(0), *epoch(1), "fit_end"]


def test_callbacks_read_the_latest_step_values(session, digits_train):
    losses = []

    class Watch(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            losses.append((trainer.step_metrics["train_loss"], float(outputs)))

    Trainer(batch_size=16, callbacks=[Watch()]).fit(TrainingModule(session), small(digits_train, 48))
    assert len(losses) == 3 and all(a == pytest.approx(b) for a, b in losses)


def test_should_stop_ends_the_fit_after_the_current_batch(session, digits_train):
    class StopAtThree(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            trainer.should_stop = batch_idx == 2

    result = Trainer(max_epochs=5, batch_size=8, callbacks=[StopAtThree()]).fit(TrainingModule(session),
                                                                               small(digits_train, 80))
    assert (result.steps, result.epochs) == (3, 1)


def test_module_epoch_hooks_run_and_may_log(session, digits_train, digits_test):
    class Hooked(TrainingModule):
        def __init__(self, s):
            super().__init__(s)
            self.events = []

        def on_fit_start(self):
            self.events.append("fit_start")

        def on_train_epoch_end(self):
            self.events.append(f"train_end {self.current_epoch} step {self.global_step}")
            self.log("epoch_marker", self.current_epoch + 10)

        def on_validation_epoch_end(self):
            self.events.append("val_end")

        def on_fit_end(self):
            self.events.append("fit_end")

    module = Hooked(session)
    result = Trainer(max_epochs=2, batch_size=32).fit(module, small(digits_train, 64), small(digits_test, 10))
    assert module.events == ["fit_start", "val_end", "train_end 0 step 2", "val_end", "train_end 1 step 4", "fit_end"]
    assert [h["epoch_marker"] for h in result.history] == [10, 11]


def test_non_callbacks_are_rejected():
    with pytest.raises(ConfigError, match="must subclass"):
        Trainer(callbacks=[object()])


@pytest.mark.parametrize("kwargs, message", [
    ({"max_epochs": 0}, "max_epochs must be a positive integer"),
    ({"max_steps": -1}, "max_steps must be a positive integer"),
    ({"max_epochs": None}, "set max_epochs or max_steps"),
    ({"batch_size": 0}, "batch_size must be a positive integer"),
    ({"batch_size": 2.5}, "batch_size must be a positive integer"),
    ({"accumulate_grad_batches": 0}, "accumulate_grad_batches must be a positive integer"),
])
def test_bad_trainer_settings_are_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Trainer(**kwargs)


# ---- data forms ---------------------------------------------------------------------------------

def test_fit_on_an_npz_uses_its_validation_split(session, digits_train, tmp_path):
    d = small(digits_train, 60)
    np.savez(tmp_path / "client.npz", x=d["x"][:40], labels=d["labels"][:40], val_x=d["x"][40:], val_labels=d["labels"][40:])
    result = Trainer(batch_size=16).fit(TrainingModule(session), tmp_path / "client.npz")
    assert result.num_examples == 40 and "val_accuracy" in result.metrics
    validated = Trainer(batch_size=16).validate(TrainingModule(session), tmp_path / "client.npz")
    assert validated.num_examples == 20 and set(validated.metrics) == {"val_loss", "val_accuracy"}


def test_fit_on_a_list_of_batch_tuples(session, digits_train):
    x, y = digits_train["x"], digits_train["labels"]
    batches = [(x[i:i + 10], y[i:i + 10]) for i in range(0, 30, 10)]
    result = Trainer(max_epochs=2).fit(TrainingModule(session), batches)
    assert (result.num_examples, result.steps) == (30, 6)


def test_a_generator_is_enough_for_one_epoch_but_not_two(session, digits_train):
    x, y = digits_train["x"], digits_train["labels"]
    gen = lambda: ((x[i:i + 10], y[i:i + 10]) for i in range(0, 30, 10))
    assert Trainer(max_epochs=1).fit(TrainingModule(session), gen()).steps == 3
    with pytest.raises(DataError, match="one-shot iterator"):
        Trainer(max_epochs=2).fit(TrainingModule(session), gen())


def test_bad_batches_in_an_iterable_fail_with_the_session_message(session, digits_train):
    x, y = digits_train["x"], digits_train["labels"]
    batches = [(x[:4], y[:4]), (x[:4].astype(np.float64), y[:4])]
    with pytest.raises(DataError, match="input 'x' must be float32, got float64"):
        Trainer().fit(TrainingModule(session), batches)


def test_empty_iterable_is_a_data_error(session):
    with pytest.raises(DataError, match="produced no batches"):
        Trainer().fit(TrainingModule(session), [])


def test_wrong_training_data_is_reported_before_any_step(session, digits_train):
    before = session.to_buffer().copy()
    bad = {"x": digits_train["x"][:10].astype(np.float64), "labels": digits_train["labels"][:10]}
    with pytest.raises(DataError, match=r"training data: input 'x' must be float32\[\?, 64\], got float64\[10, 64\]"):
        Trainer().fit(TrainingModule(session), bad)
    np.testing.assert_array_equal(session.to_buffer(), before)


def test_test_reports_loss_and_accuracy(session, digits_test):
    result = Trainer(batch_size=100).test(TrainingModule(session), digits_test)
    assert set(result.metrics) == {"test_loss", "test_accuracy"}
    assert result.sync_dist == {"test_loss", "test_accuracy"}
    assert (result.num_examples, result.batches, result.steps) == (len(digits_test["labels"]), 4, 0)


def test_predict_returns_outputs_per_batch_with_or_without_labels(session, digits_test):
    module = TrainingModule(session)
    features_only = Trainer(batch_size=100).predict(module, {"x": digits_test["x"][:250]})
    assert [p["logits"].shape for p in features_only] == [(100, 10), (100, 10), (50, 10)]
    with_labels = Trainer(batch_size=100).predict(module, small(digits_test, 250))
    np.testing.assert_allclose(np.concatenate([p["logits"] for p in with_labels]),
                               np.concatenate([p["logits"] for p in features_only]), rtol=1e-6)
    listed = Trainer().predict(module, [(digits_test["x"][:5], digits_test["labels"][:5])])
    assert listed[0]["logits"].shape == (5, 10)


@pytest.mark.slow
def test_progress_bar_shows_the_epoch_and_prog_bar_metrics(session, digits_train, capsys):
    Trainer(max_epochs=2, batch_size=16, progress=True).fit(TrainingModule(session), small(digits_train, 64),
                                                            small(digits_train, 16))
    err = capsys.readouterr().err
    assert "epoch 1/2" in err and "epoch 2/2" in err
    assert "train_loss=" in err and "val_accuracy=" in err


# ---- package ------------------------------------------------------------------------------------

_NO_TORCH = """
import sys, numpy as np
from fedort import edge_client
from fedort.edge_client import Trainer, TrainingModule, TrainingSession, build_artifacts
from fedort.ort.models import mlp
import tempfile
with tempfile.TemporaryDirectory() as d:
    build_artifacts(mlp(), d)
    s = TrainingSession.from_artifacts(d)
    x = np.random.default_rng(0).random((64, 64), dtype=np.float32)
    y = np.arange(64, dtype=np.int64) % 10
    Trainer(max_epochs=1).fit(TrainingModule(s), {"x": x, "labels": y}, {"x": x, "labels": y})
    s.export_model_for_inference(d + "/m.onnx")
bad = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.") or m.startswith("fedort.coordinator"))
print("LOADED", bad)
"""


@pytest.mark.slow
def test_using_edge_client_never_imports_torch_or_the_coordinator():
    out = subprocess.run([sys.executable, "-c", _NO_TORCH], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout


def test_import_edge_client_is_light():
    code = "import sys, fedort.edge_client; print(sorted(m for m in ('onnxruntime', 'grpc', 'onnx') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_every_public_name_resolves():
    from fedort import edge_client

    for name in edge_client.__all__:
        assert getattr(edge_client, name) is not None, name
    with pytest.raises(AttributeError):
        edge_client.NoSuchThing  # noqa: B018
