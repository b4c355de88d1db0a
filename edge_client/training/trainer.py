"""`Trainer`: runs a `TrainingModule`'s fit / validate / test / predict loops over local data.

The loop is Lightning's, on ORT's on-device training API: per batch `training_step` (forward +
backward, gradients accumulate in the session), every `accumulate_grad_batches` batches one
optimizer step, a schedule step and a lazy gradient reset; metrics logged with `module.log`
are reduced per epoch; callbacks and module hooks run at epoch and fit boundaries. The hot loop
does nothing else, so it stays within a few percent of a bare `onnxruntime.training.api` loop
(see benchmarks/bench_trainer.py).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedort.common.errors import ConfigError, DataError
from fedort.edge_client.training.batches import (
    VAL_PREFIX,
    ArrayData,
    DataLike,
    IterableData,
    as_data,
    check_batch_size,
    is_path,
    npz_validation_split,
)
from fedort.edge_client.training.module import ConstantLR, LinearWarmupDecay, MetricCollector, TrainingModule


@dataclass(frozen=True)
class RunResult:
    """What a fit, validate or test run produced.

    `metrics` are the last epoch's reduced values (training and validation); `sync_dist` names
    the metrics the coordinator averages across clients; `num_examples` is how many examples one
    epoch drew (the data set size unless `max_steps` cut the first epoch short; the FedAvg weight);
    `steps` counts optimizer steps; `history` holds one metrics dict per epoch.
    """

    metrics: dict[str, float]
    sync_dist: frozenset[str]
    num_examples: int
    steps: int = 0
    epochs: int = 0
    batches: int = 0
    history: tuple[dict[str, float], ...] = field(default_factory=tuple)


class Callback:
    """Base class for code that watches or steers the loops; override only the hooks you need.

    Set `trainer.should_stop = True` in any hook to end the fit after the current batch.
    """

    def on_fit_start(self, trainer: Trainer, module: TrainingModule) -> None: ...
    def on_fit_end(self, trainer: Trainer, module: TrainingModule) -> None: ...
    def on_train_epoch_start(self, trainer: Trainer, module: TrainingModule) -> None: ...
    def on_train_epoch_end(self, trainer: Trainer, module: TrainingModule) -> None: ...

    def on_train_batch_end(
        self, trainer: Trainer, module: TrainingModule, outputs: Any, batch: tuple[np.ndarray, ...], batch_idx: int
    ) -> None: ...

    def on_validation_epoch_end(self, trainer: Trainer, module: TrainingModule) -> None: ...
    def on_test_epoch_end(self, trainer: Trainer, module: TrainingModule) -> None: ...


def _overrides(cb: Callback, name: str) -> bool:
    return getattr(type(cb), name) is not getattr(Callback, name)


class Trainer:
    """Runs the loops. One Trainer may be reused for several fits (the edge client does, per round).

    Training stops after `max_epochs` epochs or `max_steps` optimizer steps, whichever comes
    first (`max_epochs=None` needs `max_steps`). Shuffling draws a fresh permutation each epoch
    from `numpy.random.default_rng(seed)`, so a fit is reproducible; iterables of batches are
    used in their own order. With `accumulate_grad_batches=k` ORT *sums* the gradients of k
    batches before one optimizer step (a leftover at the end of an epoch still steps). With the
    built-in mean losses that is k times the mean gradient of the k batches: AdamW barely
    notices the scale, plain SGD needs `lr / k` to match one step on a k-times larger batch.
    `optimizer_step`, if given, is called instead of `session.optimizer_step()` (FedProx's
    proximal step, `edge_client.fedprox`).
    """

    def __init__(
        self,
        max_epochs: int | None = 1,
        max_steps: int | None = None,
        batch_size: int = 32,
        shuffle: bool = True,
        seed: int = 0,
        accumulate_grad_batches: int = 1,
        progress: bool = False,
        callbacks: Sequence[Callback] = (),
        optimizer_step: Callable[[], None] | None = None,
    ) -> None:
        for name, value in (("max_epochs", max_epochs), ("max_steps", max_steps)):
            if value is not None and (not isinstance(value, (int, np.integer)) or value < 1):
                raise ConfigError(f"{name} must be a positive integer or None, got {value!r}")
        if max_epochs is None and max_steps is None:
            raise ConfigError("set max_epochs or max_steps; with neither, training would never stop")
        if not isinstance(accumulate_grad_batches, (int, np.integer)) or accumulate_grad_batches < 1:
            raise ConfigError(f"accumulate_grad_batches must be a positive integer, got {accumulate_grad_batches!r}")
        for cb in callbacks:
            if not isinstance(cb, Callback):
                raise ConfigError(f"callbacks must subclass edge_client.trainer.Callback, got {type(cb).__name__}")
        self.max_epochs = max_epochs
        self.max_steps = max_steps
        self.optimizer_step = optimizer_step
        self.batch_size = check_batch_size(batch_size)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.accumulate_grad_batches = int(accumulate_grad_batches)
        self.progress = progress
        self.callbacks = tuple(callbacks)
        self.current_epoch = 0
        self.global_step = 0
        self.should_stop = False
        self.callback_metrics: dict[str, float] = {}
        self._collector: MetricCollector | None = None

    @property
    def step_metrics(self) -> dict[str, float]:
        """The latest value of every metric logged in the running loop (for callbacks, per batch)."""
        collector = self._collector
        return {} if collector is None else {n: m.last for n, m in collector.metrics.items()}

    # ---- fit ----------------------------------------------------------------------------------

    def fit(self, module: TrainingModule, train_data: DataLike, val_data: DataLike | None = None) -> RunResult:
        """Train `module` on `train_data` (validating on `val_data`, or a .npz's `val_` split, each epoch)."""
        session = module.session
        specs = session.input_specs
        labels = _class_labels(module)
        train = as_data(train_data, session.train_input_names, specs, "training data", labels=labels)
        val: ArrayData | IterableData | None
        if val_data is not None:
            val = as_data(
                val_data, self._eval_names(module), specs, "validation data", prefix=VAL_PREFIX, labels=labels
            )
        elif is_path(train_data):
            val = npz_validation_split(train_data, self._eval_names(module), specs, labels)
        else:
            val = None

        k = self.accumulate_grad_batches
        scheduler_step = self._apply_lr_plan(module, train)
        collector = MetricCollector(default_on_step=True, default_on_epoch=False)
        self.current_epoch, self.global_step, self.should_stop = 0, 0, False
        self.callback_metrics = {}
        module.trainer = self
        module._collector = self._collector = collector
        module._batches_checked = isinstance(train, ArrayData)  # validated as whole arrays by as_data
        session.lazy_reset_grad()  # gradients left by an earlier step must not leak into this fit
        module.on_fit_start()
        for cb in self.callbacks:
            cb.on_fit_start(self, module)

        batch_cbs = [cb for cb in self.callbacks if _overrides(cb, "on_train_batch_end")]
        rng = np.random.default_rng(self.seed) if self.shuffle and isinstance(train, ArrayData) else None
        training_step = module.training_step
        optimizer_step, lazy_reset_grad = self.optimizer_step or session.optimizer_step, session.lazy_reset_grad
        max_steps = self.max_steps if self.max_steps is not None else math.inf
        history: list[dict[str, float]] = []
        sync: set[str] = set()
        num_examples = batches = epoch = 0
        epochs = range(self.max_epochs) if self.max_epochs is not None else _count()
        bar = None
        try:
            for epoch in epochs:
                self.current_epoch = epoch
                collector.reset_epoch()
                module.on_train_epoch_start()
                for cb in self.callbacks:
                    cb.on_train_epoch_start(self, module)
                bar = self._bar(train, epoch)
                seen = pending = 0
                stop = False
                for batch_idx, batch in enumerate(train.batches(self.batch_size, rng)):
                    # ---- hot loop: keep it lean (benchmarks/bench_trainer.py) ----
                    n = batch[0].shape[0]
                    collector.batch_size = n
                    outputs = training_step(batch, batch_idx)
                    seen += n
                    pending += 1
                    if pending == k:
                        optimizer_step()
                        if scheduler_step is not None:
                            scheduler_step()
                        lazy_reset_grad()
                        pending = 0
                        self.global_step += 1
                        stop = self.global_step >= max_steps
                    for cb in batch_cbs:
                        cb.on_train_batch_end(self, module, outputs, batch, batch_idx)
                    if bar is not None:
                        self._bar_update(bar, batch_idx, collector)
                    if stop or self.should_stop:
                        break
                if pending:  # a partial accumulation at the end of the epoch still counts
                    optimizer_step()
                    if scheduler_step is not None:
                        scheduler_step()
                    lazy_reset_grad()
                    self.global_step += 1
                if seen == 0:
                    raise DataError(f"training data produced no batches in epoch {epoch + 1}")
                batches += batch_idx + 1
                num_examples = max(num_examples, seen)

                record = collector.epoch_values()
                self.callback_metrics = dict(record)
                if val is not None:
                    vm, vsync, _, _ = self._eval_loop(module, val, "validation")
                    record.update(vm)
                    sync |= vsync
                module._collector = collector
                self.callback_metrics = dict(record)
                module.on_train_epoch_end()
                record.update(collector.epoch_values())
                self.callback_metrics = dict(record)
                for cb in self.callbacks:
                    cb.on_train_epoch_end(self, module)
                history.append(record)
                if bar is not None:
                    bar.set_postfix(_short(self._bar_metrics(record, collector)), refresh=False)
                    bar.close()
                    bar = None
                if self.global_step >= max_steps or self.should_stop:
                    break
        finally:
            module._collector = None
            module._batches_checked = False
            if bar is not None:  # an exception left the epoch's bar open
                bar.close()
        module.on_fit_end()
        for cb in self.callbacks:
            cb.on_fit_end(self, module)
        sync |= collector.sync_dist()
        return RunResult(
            metrics=dict(history[-1]) if history else {},
            sync_dist=frozenset(sync),
            num_examples=num_examples,
            steps=self.global_step,
            epochs=epoch + 1,
            batches=batches,
            history=tuple(history),
        )

    def _apply_lr_plan(self, module: TrainingModule, train: ArrayData | IterableData) -> Callable[[], None] | None:
        plan = module.configure_optimizers()
        session = module.session
        if isinstance(plan, ConstantLR):
            session.learning_rate = plan.lr
            return None
        if isinstance(plan, LinearWarmupDecay):
            total = plan.total_steps or self._planned_steps(train)
            if total is None:
                raise ConfigError(
                    "LinearWarmupDecay without total_steps needs data of known length "
                    "(arrays, .npz, or a list of batches) or Trainer(max_steps=...)"
                )
            if plan.warmup_steps > total:
                raise ConfigError(f"warmup_steps={plan.warmup_steps} exceeds the {total} optimizer steps of this fit")
            session.register_linear_lr_scheduler(plan.warmup_steps, total, plan.lr)
            return session.scheduler_step
        raise ConfigError(f"configure_optimizers must return ConstantLR or LinearWarmupDecay, got {plan!r}")

    def _planned_steps(self, train: ArrayData | IterableData) -> int | None:
        nb = train.num_batches(self.batch_size)
        per_epoch = None if nb is None else -(-nb // self.accumulate_grad_batches)
        candidates = [
            s
            for s in (
                self.max_steps,
                None if per_epoch is None or self.max_epochs is None else per_epoch * self.max_epochs,
            )
            if s is not None
        ]
        return min(candidates) if candidates else None

    # ---- evaluation ---------------------------------------------------------------------------

    def validate(self, module: TrainingModule, data: DataLike) -> RunResult:
        """Run `validation_step` over `data` (a .npz's `val_` split if it has one); metrics `val_*`."""
        specs = module.session.input_specs
        val = as_data(
            data, self._eval_names(module), specs, "validation data", prefix=VAL_PREFIX, labels=_class_labels(module)
        )
        metrics, sync, n, batches = self._eval_loop(module, val, "validation")
        return RunResult(metrics=metrics, sync_dist=sync, num_examples=n, batches=batches)

    def test(self, module: TrainingModule, data: DataLike) -> RunResult:
        """Run `test_step` over `data`; metrics `test_*`."""
        specs = module.session.input_specs
        test = as_data(data, self._eval_names(module), specs, "test data", labels=_class_labels(module))
        metrics, sync, n, batches = self._eval_loop(module, test, "test")
        return RunResult(metrics=metrics, sync_dist=sync, num_examples=n, batches=batches)

    def predict(self, module: TrainingModule, data: DataLike) -> list[dict[str, np.ndarray]]:
        """`predict_step` per batch; labels in `data` are optional (missing ones are fed zeros)."""
        specs = module.session.input_specs
        names = module.feature_names
        if isinstance(data, Mapping) and all(n in data for n in self._eval_names(module)):
            names = self._eval_names(module)
        pred = as_data(data, names, specs, "prediction data")
        if isinstance(pred, IterableData):
            pred.extra_ok = True
        return [module.predict_step(batch, i) for i, batch in enumerate(pred.batches(self.batch_size, None))]

    def _eval_loop(
        self, module: TrainingModule, data: ArrayData | IterableData, stage: str
    ) -> tuple[dict[str, float], frozenset[str], int, int]:
        validation = stage == "validation"
        step = module.validation_step if validation else module.test_step
        collector = MetricCollector(default_on_step=False, default_on_epoch=True)
        previous, module._collector = module._collector, collector
        try:
            (module.on_validation_epoch_start if validation else module.on_test_epoch_start)()
            seen = batches = 0
            for batch_idx, batch in enumerate(data.batches(self.batch_size, None)):
                n = batch[0].shape[0]
                collector.batch_size = n
                step(batch, batch_idx)
                seen += n
                batches += 1
            (module.on_validation_epoch_end if validation else module.on_test_epoch_end)()
            metrics = collector.epoch_values()
            self.callback_metrics = {**self.callback_metrics, **metrics}
            for cb in self.callbacks:
                (cb.on_validation_epoch_end if validation else cb.on_test_epoch_end)(self, module)
        finally:
            module._collector = previous
        return metrics, collector.sync_dist(), seen, batches

    @staticmethod
    def _eval_names(module: TrainingModule) -> tuple[str, ...]:
        return module.session.eval_input_names or module.session.train_input_names

    # ---- progress bar -------------------------------------------------------------------------

    def _bar(self, train: ArrayData | IterableData, epoch: int):
        if not self.progress:
            return None
        from tqdm.auto import tqdm  # only when asked for: the hot loop never touches tqdm otherwise

        of = f"/{self.max_epochs}" if self.max_epochs is not None else ""
        return tqdm(
            total=train.num_batches(self.batch_size),
            desc=f"epoch {epoch + 1}{of}",
            unit="batch",
            file=sys.stderr,
            leave=True,
            dynamic_ncols=True,
        )

    def _bar_update(self, bar, batch_idx: int, collector: MetricCollector) -> None:
        bar.update(1)
        if batch_idx % 10 == 0:
            bar.set_postfix(_short(collector.progress_values()), refresh=False)

    @staticmethod
    def _bar_metrics(record: dict[str, float], collector: MetricCollector) -> dict[str, float]:
        shown = {n for n, m in collector.metrics.items() if m.prog_bar}
        return {n: v for n, v in record.items() if n in shown or n.startswith("val_")}


def _class_labels(module: TrainingModule):
    """(label input, class count) from the session's manifest, for the label range check."""
    manifest = module.session.manifest
    return manifest.class_labels if manifest is not None else None


def _short(metrics: dict[str, float]) -> dict[str, str]:
    return {k: f"{v:.4g}" for k, v in metrics.items()}


def _count():
    epoch = 0
    while True:
        yield epoch
        epoch += 1


__all__ = ["Trainer", "Callback", "RunResult"]
