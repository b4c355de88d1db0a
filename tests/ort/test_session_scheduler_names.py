"""`TrainingSession.register_linear_lr_scheduler` takes ORT's parameter names; the former ones still work."""

from __future__ import annotations

import pytest

from fedort.ort.session import TrainingSession


@pytest.fixture
def session(mlp_artifacts) -> TrainingSession:
    return TrainingSession.from_artifacts(mlp_artifacts)


def step(s: TrainingSession, x, y) -> None:
    s.train_step(x, y)
    s.optimizer_step()
    s.lazy_reset_grad()


def test_the_scheduler_takes_orts_parameter_names(session, batch):
    session.register_linear_lr_scheduler(warmup_step_count=2, total_step_count=10, initial_lr=1.0)
    step(session, *batch)
    session.scheduler_step()
    assert session.learning_rate == pytest.approx(0.5)


def test_the_former_scheduler_parameter_names_still_work_with_a_deprecation_warning(session, batch):
    with pytest.warns(DeprecationWarning, match="warmup_step_count"):
        session.register_linear_lr_scheduler(warmup_steps=2, total_steps=10, initial_lr=1.0)
    step(session, *batch)
    session.scheduler_step()
    assert session.learning_rate == pytest.approx(0.5)
