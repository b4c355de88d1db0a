"""FedProx on the device (Li et al., MLSys 2020): local objective f(w) + μ/2·‖w − w_g‖².

w_g is the round's global vector. Its gradient is ∇f(w) + μ(w − w_g), so one SGD step of FedProx is

    w' = w − lr·(∇f(w) + μ(w − w_g)) = SGD_lr(w) − lr·μ·(w − w_g)

ORT's artifacts fix the loss graph, so the proximal part is applied through the flat parameter
buffer around `optimizer_step`: read w (`to_buffer`) *before* the step, let ORT's SGD take its
step with the gradient of f, then subtract lr·μ·(w − w_g) with the pre-step w and the learning
rate that step used. That is exact for plain SGD (its update is linear in the gradient, so the
two parts of the gradient may be applied one after the other). Two forms that look similar are
not FedProx's step: using the post-step w gives (1 − lr·μ)·SGD(w) + lr·μ·w_g, off by lr²·μ·∇f(w);
and (SGD(w) + lr·μ·w_g)/(1 + lr·μ) is the implicit (proximal-operator) step.

AdamW is not linear in the gradient (moments, normalisation, decoupled decay), so no correction
outside the graph reproduces AdamW on f + μ/2·‖w − w_g‖²; `ProximalSGDStep` refuses non-SGD
artifacts (build them with `fedort artifacts build --optimizer sgd`). Adding the term to the
training graph (global parameters as extra inputs) would cover AdamW; it is not built yet.

μ = 0 never wraps the step, so training is plain FedAvg bit for bit. With gradient accumulation
the term is added once per optimizer step, like the accumulated gradient of f.
"""

from __future__ import annotations

import math

import numpy as np

from fedort.common.errors import ConfigError
from fedort.ort.session import TrainingSession


class ProximalSGDStep:
    """A drop-in for `session.optimizer_step` that takes FedProx's step around `center` (w_g)."""

    def __init__(self, session: TrainingSession, center: np.ndarray, mu: float) -> None:
        if not (isinstance(mu, (int, float)) and math.isfinite(mu) and mu > 0):
            raise ConfigError(f"prox_mu must be a finite number > 0 to take a proximal step, got {mu!r}")
        optimizer = session.manifest.optimizer if session.manifest is not None else None
        if optimizer != "sgd":
            raise ConfigError(
                f"FedProx (prox_mu={mu:g}) is exact only for SGD artifacts; these use "
                f"{optimizer or 'an unknown optimizer (no manifest)'}: rebuild them with "
                f"`fedort artifacts build --optimizer sgd`"
            )
        self.session = session
        self.center = np.array(center, dtype=np.float32, copy=True)
        self.mu = float(mu)

    def __call__(self) -> None:
        session = self.session
        before = np.array(session.to_buffer(), dtype=np.float32, copy=True)
        lr = np.float32(session.learning_rate)  # the rate this step uses (schedulers step after it)
        session.optimizer_step()
        after = session.to_buffer()
        before -= self.center  # w − w_g, in place
        before *= lr * np.float32(self.mu)  # lr·μ·(w − w_g)
        session.from_buffer(np.subtract(after, before, dtype=np.float32))


def proximal_step(session: TrainingSession, center: np.ndarray, mu: float) -> ProximalSGDStep | None:
    """The optimizer step for local training with proximal weight `mu` (None: the plain step, μ = 0)."""
    if mu == 0:
        return None
    return ProximalSGDStep(session, center, mu)


__all__ = ["ProximalSGDStep", "proximal_step"]
