"""The on-device work of one task: train from a global vector (FIT), or evaluate it (EVALUATE).

A FIT task with `prox_mu` > 0 trains FedProx's local objective (`edge_client.fedprox`).

No networking here: `EdgeClient` fetches the vector and uploads the result. A shared
`TrainingSession` is reset per task — `from_buffer` replaces the parameters and, when the task
says `reset_optimizer`, `reset_optimizer_state` drops the AdamW moments of the previous round
(or of the previous virtual client).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedort.common.client_data import ClientData
from fedort.common.errors import TrainingError
from fedort.edge_client.training.fedprox import proximal_step
from fedort.edge_client.training.guards import all_finite
from fedort.edge_client.transport.retry import StoppedError
from fedort.ort.artifacts import TensorSpec
from fedort.ort.session import TrainingSession
from fedort.protos.messages import Metric, TrainConfig

ModuleFactory = Callable[[TrainingSession], Any]
# Research/testing hook: (task, global vector, trained vector) -> the vector to upload instead.
# Simulations use it to play Byzantine clients (simulations.attacks); a real device leaves it unset.
UpdateHook = Callable[[Any, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class LocalResult:
    """What a task produced: the trained vector (FIT only), the example count and the metrics."""

    vector: np.ndarray | None
    num_examples: int
    metrics: Mapping[str, Metric]


def default_module(session: TrainingSession):
    """The stock `TrainingModule` (logs train_loss, val_loss, val_accuracy with sync_dist=True)."""
    from fedort.edge_client.training.module import TrainingModule

    return TrainingModule(session)


def _module(factory: ModuleFactory | None, session: TrainingSession, lr: float):
    module = (factory or default_module)(session)
    module.lr = lr
    return module


def _metrics(values: Mapping[str, Any], sync: frozenset[str]) -> dict[str, Metric]:
    """Finite numeric metrics, flagged for cross-client averaging when logged with sync_dist."""
    out = {}
    for k, v in values.items():
        if isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(float(v)):
            out[k] = Metric(float(v), k in sync)
    return out


def fit(
    session: TrainingSession,
    global_vector: np.ndarray,
    data: ClientData,
    inputs: tuple[TensorSpec, ...],
    config: TrainConfig,
    module_factory: ModuleFactory | None = None,
    stop: threading.Event | None = None,
    max_steps: int | None = None,
) -> LocalResult:
    """Train `config.local_epochs` epochs from `global_vector`; returns a copy of the new parameters.

    `max_steps` caps the optimizer steps (a device doing partial work, FedProx's stragglers); the
    update then counts the examples those steps drew, as the Trainer reports them.
    Setting `stop` ends training after the current batch and raises StoppedError (an update
    from a cut-short fit is never returned).
    """
    from fedort.edge_client.training.trainer import Trainer

    session.from_buffer(global_vector)
    if config.reset_optimizer:
        session.reset_optimizer_state()
    module = _module(module_factory, session, config.learning_rate)
    # batch_size 0 means the whole local data set in one batch (FedSGD)
    batch = config.batch_size or max(1, data.num_examples)
    trainer = Trainer(
        max_epochs=max(1, config.local_epochs),
        max_steps=max_steps,
        batch_size=batch,
        shuffle=True,
        seed=config.seed,
        progress=False,
        callbacks=(_stop_callback(stop),) if stop is not None else (),
        optimizer_step=proximal_step(session, global_vector, config.prox_mu),
    )
    val = data.arrays_for(inputs, "val") if data.val else None
    result = trainer.fit(module, data.arrays_for(inputs), val)
    if stop is not None and stop.is_set():
        raise StoppedError("stopped during local training")
    vector = np.ascontiguousarray(session.to_buffer(), dtype=np.float32)  # to_buffer's array is already our own copy
    if not all_finite(vector):
        raise TrainingError(
            f"local training produced NaN or infinite parameters (learning rate "
            f"{config.learning_rate} too high?); the update is not uploaded"
        )
    return LocalResult(vector, int(result.num_examples), _metrics(result.metrics, result.sync_dist))


def _stop_callback(stop: threading.Event):
    from fedort.edge_client.training.trainer import Callback

    class StopWhenSet(Callback):
        """Ends the fit after the current batch once `stop` is set (a signal, `EdgeClient.stop()`)."""

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
            if stop.is_set():
                trainer.should_stop = True

    return StopWhenSet()


def evaluate(
    session: TrainingSession,
    global_vector: np.ndarray,
    data: ClientData,
    inputs: tuple[TensorSpec, ...],
    config: TrainConfig,
    module_factory: ModuleFactory | None = None,
) -> LocalResult:
    """Validate `global_vector` on the validation split (or the training data if there is none)."""
    from fedort.edge_client.training.trainer import Trainer

    session.from_buffer(global_vector)
    module = _module(module_factory, session, config.learning_rate)
    trainer = Trainer(batch_size=max(1, config.batch_size or 32), shuffle=False, progress=False)
    result = trainer.validate(module, data.arrays_for(inputs, "val" if data.val else "train"))
    # evaluation metrics are for averaging unless the module said otherwise for some of them
    sync = result.sync_dist or frozenset(result.metrics)
    return LocalResult(None, int(result.num_examples), _metrics(result.metrics, sync))


__all__ = ["LocalResult", "ModuleFactory", "UpdateHook", "default_module", "evaluate", "fit"]
