"""`TrainingModule`: the user's training code, organised into step hooks the `Trainer` calls.

Modelled on PyTorch Lightning's `LightningModule`, over a `TrainingSession` instead of a torch
module: `training_step` / `validation_step` / `test_step` / `predict_step`, an LR plan from
`configure_optimizers`, and `log` / `log_dict` for metrics the trainer reduces per epoch.
Metrics logged with ``sync_dist=True`` are the ones the coordinator averages across clients.

What is *not* here, on purpose: ``freeze()`` / ``unfreeze()`` (ORT fixes the trainable
parameters when the artifacts are built: use ``fedort artifacts build --frozen NAME``), devices
and precision (the session's `SessionConfig`), ``to_onnx`` (`TrainingSession.export_model_for_inference`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from fedort.common.errors import ConfigError, DataError
from fedort.ort.session import TrainingSession

if TYPE_CHECKING:  # pragma: no cover
    from fedort.edge_client.training.trainer import Trainer

ReduceFx = Union[str, Callable[[np.ndarray], float]]


# ---- learning-rate plans ----------------------------------------------------------------------


@dataclass(frozen=True)
class ConstantLR:
    """One learning rate for the whole fit."""

    lr: float

    def __post_init__(self) -> None:
        if not (self.lr >= 0 and math.isfinite(self.lr)):
            raise ConfigError(f"learning rate must be a finite number >= 0, got {self.lr}")


@dataclass(frozen=True)
class LinearWarmupDecay:
    """ORT's linear schedule: 0 -> `lr` over `warmup_steps` optimizer steps, then linearly to 0 at `total_steps`.

    The rate for optimizer step k (counting from 0) is ``lr * k / warmup_steps`` while
    ``k < warmup_steps`` and ``lr * (total_steps - k) / (total_steps - warmup_steps)`` after,
    so the very first step of a warmup runs at 0. ORT counts k with the optimizer's own step
    counter, which restarts only with fresh optimizer state (`TrainingSession.reset_optimizer_state`).
    `total_steps=None` lets the Trainer use the number of optimizer steps of the fit.
    """

    lr: float
    warmup_steps: int = 0
    total_steps: int | None = None

    def __post_init__(self) -> None:
        ConstantLR(self.lr)
        total = self.total_steps
        if (
            self.warmup_steps < 0
            or (total is not None and not 0 < total)
            or (total is not None and self.warmup_steps > total)
        ):
            raise ConfigError(
                f"need 0 <= warmup_steps <= total_steps and total_steps > 0, "
                f"got warmup_steps={self.warmup_steps}, total_steps={total}"
            )

    def lr_at(self, step: int, total_steps: int | None = None) -> float:
        """The rate ORT applies at optimizer step `step` (0-based); for checking schedules."""
        total = self.total_steps if self.total_steps is not None else total_steps
        if total is None:
            raise ConfigError("lr_at needs total_steps")
        if step < self.warmup_steps:
            return self.lr * step / self.warmup_steps
        return self.lr * max(0.0, (total - step) / max(1, total - self.warmup_steps))


LRPlan = Union[ConstantLR, LinearWarmupDecay]


# ---- metric collection ------------------------------------------------------------------------

_REDUCERS = ("mean", "sum", "max", "min")


class _Metric:
    """One logged name: its options and the running reduction over the current epoch."""

    __slots__ = ("reduce", "on_step", "on_epoch", "prog_bar", "sync_dist", "total", "weight", "values", "last")

    def __init__(self, reduce: ReduceFx, on_step: bool, on_epoch: bool, prog_bar: bool, sync_dist: bool) -> None:
        if not callable(reduce) and reduce not in _REDUCERS:
            raise ConfigError(f"reduce_fx must be one of {list(_REDUCERS)} or a callable, got {reduce!r}")
        self.reduce, self.on_step, self.on_epoch = reduce, on_step, on_epoch
        self.prog_bar, self.sync_dist = prog_bar, sync_dist
        self.last = math.nan
        self.reset()

    def reset(self) -> None:
        """Start a new epoch (the last step value is kept)."""
        r = self.reduce
        self.total = -math.inf if r == "max" else math.inf if r == "min" else 0.0
        self.weight = 0.0
        self.values: list[float] = []

    def update(self, v: float, w: float) -> None:
        r = self.reduce
        if r == "mean":
            self.total += v * w
            self.weight += w
            return
        self.weight += 1
        if r == "sum":
            self.total += v
        elif r == "max":
            self.total = max(self.total, v)
        elif r == "min":
            self.total = min(self.total, v)
        else:
            self.values.append(v)

    def value(self) -> float:
        """The epoch reduction so far (mean weighted by batch size), or the last value if on_step only."""
        if not self.on_epoch or self.weight == 0:
            return self.last
        r = self.reduce
        if r == "mean":
            return self.total / self.weight
        if callable(r):
            return float(r(np.asarray(self.values, dtype=np.float64)))
        return self.total


class MetricCollector:
    """What `TrainingModule.log` writes into during one loop (fit, validate or test)."""

    def __init__(self, default_on_step: bool, default_on_epoch: bool) -> None:
        self.default_on_step = default_on_step
        self.default_on_epoch = default_on_epoch
        self.metrics: dict[str, _Metric] = {}
        self.batch_size = 1

    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool,
        on_step: bool | None,
        on_epoch: bool | None,
        reduce_fx: ReduceFx,
        sync_dist: bool,
        batch_size: int | None,
    ) -> None:
        m = self.metrics.get(name)
        if m is None:
            m = self.metrics[name] = _Metric(
                reduce_fx,
                self.default_on_step if on_step is None else on_step,
                self.default_on_epoch if on_epoch is None else on_epoch,
                prog_bar,
                sync_dist,
            )
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"log({name!r}) takes a number or a one-element array, got "
                f"{type(value).__name__} {getattr(value, 'shape', '')}"
            ) from None
        m.last = v
        if m.on_epoch:
            w = self.batch_size if batch_size is None else batch_size
            if m.reduce == "mean":  # the common case, inlined: this runs once per step
                m.total += v * w
                m.weight += w
            else:
                m.update(v, w)

    def reset_epoch(self) -> None:
        for m in self.metrics.values():
            m.reset()

    def epoch_values(self) -> dict[str, float]:
        return {name: m.value() for name, m in self.metrics.items() if m.weight or not m.on_epoch}

    def progress_values(self) -> dict[str, float]:
        return {name: m.value() for name, m in self.metrics.items() if m.prog_bar}

    def sync_dist(self) -> frozenset[str]:
        return frozenset(name for name, m in self.metrics.items() if m.sync_dist)


# ---- the module -------------------------------------------------------------------------------


class TrainingModule:
    """Subclass and override the hooks you need; the defaults train and evaluate the session as built.

    Batches are tuples of numpy arrays in the model's input order (features first, labels last
    for the built-in losses). `lr` is read by the default `configure_optimizers`, so setting it
    between fits (the edge client does, per round) changes the next fit's rate.
    """

    def __init__(self, session: TrainingSession, lr: float = 0.01, **hparams: Any) -> None:
        if not isinstance(session, TrainingSession):
            raise ConfigError(f"TrainingModule needs a TrainingSession, got {type(session).__name__}")
        self.session = session
        self.lr = lr
        self.hparams: dict[str, Any] = {"lr": lr, **hparams}
        self.trainer: Trainer | None = None
        self._collector: MetricCollector | None = None
        self._batches_checked = False  # set by the Trainer while it feeds batches it validated up front
        manifest = session.manifest
        self.loss_name: str = manifest.train_outputs[0] if manifest is not None else session.train_output_names[0]
        labels = manifest.label_count if manifest is not None else 1
        eval_names = session.eval_input_names or session.train_input_names
        self.feature_names: tuple[str, ...] = eval_names[: len(eval_names) - labels]
        self.label_names: tuple[str, ...] = eval_names[len(eval_names) - labels :]

    # ---- hyperparameters ---------------------------------------------------------------------

    def save_hyperparameters(self, **values: Any) -> None:
        """Record hyperparameters in `self.hparams`: the given values, or the caller's `__init__` arguments."""
        if not values:
            frame = inspect.currentframe()
            caller = frame.f_back if frame is not None else None
            if caller is not None:
                args = inspect.getargvalues(caller)
                values = {n: args.locals[n] for n in args.args if n not in ("self", "session")}
                if args.keywords:
                    values.update(args.locals.get(args.keywords, {}))
        self.hparams.update(values)

    # ---- loop context -----------------------------------------------------------------------

    @property
    def current_epoch(self) -> int:
        return self.trainer.current_epoch if self.trainer is not None else 0

    @property
    def global_step(self) -> int:
        """Optimizer steps taken in the current fit."""
        return self.trainer.global_step if self.trainer is not None else 0

    def log(
        self,
        name: str,
        value: Any,
        *,
        prog_bar: bool = False,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: ReduceFx = "mean",
        sync_dist: bool = False,
        batch_size: int | None = None,
    ) -> None:
        """Record a scalar metric for the running loop.

        `on_epoch` reduces the epoch's values with `reduce_fx` ("mean" is weighted by batch
        size, so it equals the per-example mean); `on_step` keeps the latest value (shown in the
        progress bar, seen by callbacks). Defaults follow Lightning: training hooks log on_step,
        validation/test hooks on_epoch. `sync_dist=True` marks the metric for averaging across
        clients by the coordinator. Outside a Trainer loop, `log` does nothing.
        """
        collector = self._collector
        if collector is not None:
            collector.log(name, value, prog_bar, on_step, on_epoch, reduce_fx, sync_dist, batch_size)

    def log_dict(
        self,
        metrics: Mapping[str, Any],
        *,
        prog_bar: bool = False,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: ReduceFx = "mean",
        sync_dist: bool = False,
        batch_size: int | None = None,
    ) -> None:
        """`log` for each item of `metrics`, with the same options."""
        for name, value in metrics.items():
            self.log(
                name,
                value,
                prog_bar=prog_bar,
                on_step=on_step,
                on_epoch=on_epoch,
                reduce_fx=reduce_fx,
                sync_dist=sync_dist,
                batch_size=batch_size,
            )

    # ---- optimisation -----------------------------------------------------------------------

    def configure_optimizers(self) -> LRPlan:
        """The learning-rate plan for the next fit (the optimizer itself is fixed in the artifacts)."""
        return ConstantLR(self.lr)

    # ---- step hooks ---------------------------------------------------------------------------

    def training_step(self, batch: tuple[np.ndarray, ...], batch_idx: int) -> Any:
        """Forward + backward on one batch; returns the loss. Logs `train_loss` (epoch mean, sync_dist)."""
        loss = self.session.train_step(*batch, check=not self._batches_checked)[self.loss_name]
        self.log("train_loss", loss, on_step=False, on_epoch=True, prog_bar=True, sync_dist=True)
        return loss

    def validation_step(self, batch: tuple[np.ndarray, ...], batch_idx: int) -> dict[str, float]:
        """Logs `val_loss` and, for integer labels and a 'logits' output, `val_accuracy`."""
        metrics = self.evaluate(batch, "val")
        self.log_dict(metrics, on_step=False, on_epoch=True, prog_bar=True, sync_dist=True)
        return metrics

    def test_step(self, batch: tuple[np.ndarray, ...], batch_idx: int) -> dict[str, float]:
        """Logs `test_loss` and, for integer labels and a 'logits' output, `test_accuracy`."""
        metrics = self.evaluate(batch, "test")
        self.log_dict(metrics, on_step=False, on_epoch=True, prog_bar=True, sync_dist=True)
        return metrics

    def predict_step(self, batch: tuple[np.ndarray, ...], batch_idx: int) -> dict[str, np.ndarray]:
        """The eval model's outputs except the loss; missing label inputs are fed zeros."""
        out = self.session.eval_step(*self._with_labels(batch))
        out.pop(self.loss_name, None)
        return out

    def evaluate(self, batch: tuple[np.ndarray, ...], prefix: str) -> dict[str, float]:
        """Loss (and accuracy where it makes sense) of one batch, named `<prefix>_loss` etc."""
        out = self.session.eval_step(*batch)
        metrics = {f"{prefix}_loss": float(out[self.loss_name])}
        logits = out.get("logits")
        if logits is not None and len(self.label_names) == 1:
            labels = batch[-1]
            if np.issubdtype(labels.dtype, np.integer) and logits.ndim == labels.ndim + 1:
                metrics[f"{prefix}_accuracy"] = float(np.mean(logits.argmax(-1) == labels))
        return metrics

    def _with_labels(self, batch: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        n_inputs = len(self.feature_names) + len(self.label_names)
        if len(batch) >= n_inputs:
            return tuple(batch[:n_inputs])
        rows = batch[0].shape[0]
        specs = self.session.input_specs
        filled = list(batch)
        for name in self.label_names:
            spec = specs.get(name)
            if spec is None or any(d is None for d in spec.shape[1:]):
                raise DataError(
                    f"predict needs the label input {name!r} (its shape is not known); include it in the data"
                )
            filled.append(np.zeros((rows, *spec.shape[1:]), dtype=spec.dtype))
        return tuple(filled)

    # ---- epoch and fit hooks (override as needed) ---------------------------------------------

    def on_fit_start(self) -> None: ...
    def on_fit_end(self) -> None: ...
    def on_train_epoch_start(self) -> None: ...

    def on_train_epoch_end(self) -> None:
        """Called after each training epoch, after that epoch's validation (as in Lightning 2)."""

    def on_validation_epoch_start(self) -> None: ...
    def on_validation_epoch_end(self) -> None: ...
    def on_test_epoch_start(self) -> None: ...
    def on_test_epoch_end(self) -> None: ...


__all__ = ["TrainingModule", "ConstantLR", "LinearWarmupDecay", "LRPlan", "MetricCollector", "ReduceFx"]
