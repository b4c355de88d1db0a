"""TrainingModule: default hooks over a real session, LR plans, and how logged metrics reduce."""

from __future__ import annotations

import numpy as np
import pytest

from fedort.common.errors import ConfigError
from fedort.ort.artifacts import build_artifacts
from fedort.ort.models import mlp
from fedort.edge_client.training.module import ConstantLR, LinearWarmupDecay, TrainingModule
from fedort.ort.session import TrainingSession
from fedort.edge_client.training.trainer import Trainer


@pytest.fixture
def module(mlp_artifacts) -> TrainingModule:
    return TrainingModule(TrainingSession.from_artifacts(mlp_artifacts), lr=0.02)


def test_a_module_needs_a_session():
    with pytest.raises(ConfigError, match="needs a TrainingSession, got str"):
        TrainingModule("artifacts/")


def test_module_knows_the_loss_feature_and_label_names(module):
    assert module.loss_name == "loss"
    assert module.feature_names == ("x",) and module.label_names == ("labels",)


def test_default_lr_plan_is_constant_at_the_module_lr(module):
    assert module.configure_optimizers() == ConstantLR(0.02)
    module.lr = 0.5  # what the edge client does per round
    assert module.configure_optimizers() == ConstantLR(0.5)


@pytest.mark.parametrize("make", [
    lambda: ConstantLR(-1.0),
    lambda: ConstantLR(float("nan")),
    lambda: LinearWarmupDecay(0.1, warmup_steps=-1),
    lambda: LinearWarmupDecay(0.1, warmup_steps=5, total_steps=3),
    lambda: LinearWarmupDecay(0.1, total_steps=0),
])
def test_bad_lr_plans_are_config_errors(make):
    with pytest.raises(ConfigError):
        make()


def test_linear_warmup_decay_formula():
    plan = LinearWarmupDecay(0.4, warmup_steps=2, total_steps=6)
    assert [plan.lr_at(k) for k in range(8)] == pytest.approx([0.0, 0.2, 0.4, 0.3, 0.2, 0.1, 0.0, 0.0])


def test_training_step_returns_the_loss_of_a_real_train_step(module, batch):
    loss = module.training_step(batch, 0)
    expected = module.session.eval_step(*batch)[module.loss_name]
    assert float(loss) == pytest.approx(float(expected), rel=1e-6)
    module.session.lazy_reset_grad()


def test_log_outside_a_trainer_loop_does_nothing(module, batch):
    module.log("anything", 1.0)                 # no loop is running: neither raises nor is kept ...
    module.log_dict({"a": 1.0, "b": 2.0})
    metrics = Trainer(batch_size=32, shuffle=False, max_epochs=1).fit(module, {"x": batch[0], "labels": batch[1]}).metrics
    assert not {"anything", "a", "b"} & set(metrics)   # ... nor leaks into the next loop's metrics
    assert "train_loss" in metrics


def test_evaluate_computes_loss_and_accuracy_of_a_batch(module, batch):
    metrics = module.evaluate(batch, "val")
    out = module.session.eval_step(*batch)
    assert metrics["val_loss"] == pytest.approx(float(out[module.loss_name]))
    assert metrics["val_accuracy"] == pytest.approx(float(np.mean(out["logits"].argmax(1) == batch[1])))


def test_no_accuracy_for_float_targets(tmp_path):
    build_artifacts(mlp(), tmp_path, loss="mse")
    m = TrainingModule(TrainingSession.from_artifacts(tmp_path))
    x = np.zeros((4, 64), np.float32)
    assert set(m.evaluate((x, np.zeros((4, 10), np.float32)), "test")) == {"test_loss"}


def test_predict_step_feeds_zero_labels_and_drops_the_loss(module, batch):
    out = module.predict_step((batch[0],), 0)
    assert list(out) == ["logits"]
    np.testing.assert_allclose(out["logits"], module.session.eval_step(*batch)["logits"], rtol=1e-6)


def test_save_hyperparameters_records_init_arguments(mlp_artifacts):
    class Tuned(TrainingModule):
        def __init__(self, session, lr=0.01, dropout=0.1, **extra):
            super().__init__(session, lr=lr)
            self.save_hyperparameters()

    m = Tuned(TrainingSession.from_artifacts(mlp_artifacts), lr=0.3, dropout=0.5, note="x")
    assert m.hparams == {"lr": 0.3, "dropout": 0.5, "note": "x"}
    m.save_hyperparameters(width=128)
    assert m.hparams["width"] == 128


# ---- log(): reductions, run through a real Trainer loop ------------------------------------

class Logs(TrainingModule):
    """Logs the batch index under every reduction, plus the default train_loss."""

    def __init__(self, session, **log_kwargs):
        super().__init__(session, lr=0.0)
        self.log_kwargs = log_kwargs

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        for fx in ("mean", "sum", "max", "min"):
            self.log(f"idx_{fx}", float(batch_idx), on_epoch=True, reduce_fx=fx, **self.log_kwargs)
        self.log("idx_median", batch_idx, on_epoch=True, reduce_fx=np.median)
        self.log("idx_last", batch_idx)  # training default: on_step only -> the last value
        self.log("rows", batch[0].shape[0], on_epoch=True, reduce_fx="sum", sync_dist=True)
        return loss


def test_reductions_over_an_epoch(mlp_artifacts, digits_train):
    module = Logs(TrainingSession.from_artifacts(mlp_artifacts))
    data = {k: v[:100] for k, v in digits_train.items()}  # batches of 32, 32, 32, 4
    m = Trainer(batch_size=32, shuffle=False).fit(module, data).metrics
    assert m["idx_sum"] == 6 and m["idx_max"] == 3 and m["idx_min"] == 0
    assert m["idx_median"] == 1.5 and m["idx_last"] == 3
    assert m["idx_mean"] == pytest.approx((0 * 32 + 1 * 32 + 2 * 32 + 3 * 4) / 100)  # weighted by batch size
    assert m["rows"] == 100


def test_train_loss_is_the_per_example_mean_of_the_epoch(mlp_artifacts, digits_train):
    data = {k: v[:100] for k, v in digits_train.items()}
    session = TrainingSession.from_artifacts(mlp_artifacts)
    module = TrainingModule(session, lr=0.0)  # lr 0: the parameters stay put, so eval gives the same losses
    result = Trainer(batch_size=32, shuffle=False).fit(module, data)
    losses = [float(session.eval_step(data["x"][i:i + 32], data["labels"][i:i + 32])[module.loss_name]) * len(data["x"][i:i + 32])
              for i in range(0, 100, 32)]
    assert result.metrics["train_loss"] == pytest.approx(sum(losses) / 100, rel=1e-5)


def test_sync_dist_marks_metrics_for_the_coordinator(mlp_artifacts, digits_train):
    module = Logs(TrainingSession.from_artifacts(mlp_artifacts))
    result = Trainer(shuffle=False).fit(module, {k: v[:64] for k, v in digits_train.items()})
    assert result.sync_dist == {"train_loss", "rows"}


def test_an_unknown_reduction_is_a_config_error(mlp_artifacts, digits_train):
    module = Logs(TrainingSession.from_artifacts(mlp_artifacts))

    class Bad(Logs):
        def training_step(self, batch, batch_idx):
            self.log("x", 1.0, reduce_fx="median")

    with pytest.raises(ConfigError, match="reduce_fx must be one of"):
        Trainer().fit(Bad(module.session), {k: v[:8] for k, v in digits_train.items()})


def test_logging_a_non_scalar_is_a_config_error(mlp_artifacts, digits_train):
    class Bad(TrainingModule):
        def training_step(self, batch, batch_idx):
            self.log("logits", self.session.train_step(*batch)["logits"])

    with pytest.raises(ConfigError, match=r"log\('logits'\) takes a number"):
        Trainer().fit(Bad(TrainingSession.from_artifacts(mlp_artifacts)), {k: v[:8] for k, v in digits_train.items()})
