"""edge_client.fedprox: one local step is FedProx's SGD step, μ = 0 is FedAvg bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from fedort.common.errors import ConfigError
from fedort.protos.messages import TrainConfig
from fedort.edge_client.training import local_round
from fedort.ort.artifacts import build_artifacts
from fedort.common.client_data import ClientData
from fedort.edge_client.training.fedprox import ProximalSGDStep
from fedort.ort.models import logreg
from fedort.ort.session import TrainingSession


@pytest.fixture(scope="module")
def logreg_sgd(tmp_path_factory):
    out = tmp_path_factory.mktemp("logreg-sgd")
    build_artifacts(logreg(seed=1), out, optimizer="sgd")
    return out


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    return rng.normal(0, 1, (32, 60)).astype(np.float32), rng.integers(0, 10, 32).astype(np.int64)


def _grad(vector: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """∇ of the mean softmax cross-entropy of logits = x W + b, in float64, as one flat vector [W, b]."""
    w, b = vector[:600].reshape(60, 10).astype(np.float64), vector[600:].astype(np.float64)
    z = x.astype(np.float64) @ w + b
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    p /= len(y)
    return np.concatenate([(x.T @ p).reshape(-1), p.sum(axis=0)])


def test_the_flat_vector_is_the_weight_then_the_bias(logreg_sgd):
    session = TrainingSession.from_artifacts(logreg_sgd)
    inits = {t.name: numpy_helper.to_array(t) for t in logreg(seed=1).graph.initializer}
    np.testing.assert_array_equal(session.to_buffer(), np.concatenate([inits["fc.weight"].ravel(), inits["fc.bias"]]))


@pytest.mark.parametrize("mu", [0.01, 0.5, 3.0])
def test_one_step_is_w_minus_lr_times_grad_plus_mu_times_w_minus_global(logreg_sgd, batch, mu):
    x, y = batch
    lr = 0.1
    session = TrainingSession.from_artifacts(logreg_sgd)
    rng = np.random.default_rng(1)
    w = (session.to_buffer() + rng.normal(0, 0.3, session.parameter_count())).astype(np.float32)
    w_global = (w + rng.normal(0, 0.5, w.shape)).astype(np.float32)
    session.from_buffer(w)
    session.learning_rate = lr
    session.lazy_reset_grad()
    session.train_step(x, y)
    ProximalSGDStep(session, w_global, mu)()
    expected = w.astype(np.float64) - lr * (_grad(w, x, y) + mu * (w.astype(np.float64) - w_global))
    np.testing.assert_allclose(session.to_buffer(), expected, rtol=1e-5, atol=1e-6)
    # and it is not the plain SGD step: the proximal pull is there
    plain = w.astype(np.float64) - lr * _grad(w, x, y)
    assert np.abs(session.to_buffer() - plain).max() > 1e-3 * mu


def _fit(artifacts, data, vector, mu):
    session = TrainingSession.from_artifacts(artifacts)
    config = TrainConfig(local_epochs=2, batch_size=8, learning_rate=0.1, seed=5, prox_mu=mu)
    result = local_round.fit(session, vector, data, session.manifest.inputs, config)
    return result.vector


def test_mu_zero_is_plain_fedavg_bit_for_bit(logreg_sgd, batch):
    x, y = batch
    data = ClientData.from_arrays({"x": x, "labels": y})
    start = TrainingSession.from_artifacts(logreg_sgd).to_buffer().copy()
    session = TrainingSession.from_artifacts(logreg_sgd)
    plain = local_round.fit(session, start, data, session.manifest.inputs,
                            TrainConfig(local_epochs=2, batch_size=8, learning_rate=0.1, seed=5)).vector
    assert _fit(logreg_sgd, data, start, 0.0).tobytes() == plain.tobytes()


def test_a_larger_mu_keeps_the_local_model_closer_to_the_global_one(logreg_sgd, batch):
    x, y = batch
    data = ClientData.from_arrays({"x": x, "labels": y})
    start = TrainingSession.from_artifacts(logreg_sgd).to_buffer().copy()
    drift = [float(np.linalg.norm(_fit(logreg_sgd, data, start, mu) - start)) for mu in (0.0, 1.0, 5.0)]
    assert drift[0] > drift[1] > drift[2] > 0, drift


def test_adamw_artifacts_are_refused_with_a_way_out(mlp_artifacts):
    session = TrainingSession.from_artifacts(mlp_artifacts)
    with pytest.raises(ConfigError, match=r"exact only for SGD artifacts; these use adamw.*--optimizer sgd"):
        ProximalSGDStep(session, session.to_buffer(), 0.1)


def test_train_config_carries_mu_over_the_wire():
    config = TrainConfig(local_epochs=3, prox_mu=0.25)
    assert TrainConfig.from_pb(config.to_pb()) == config and TrainConfig.from_pb(TrainConfig().to_pb()).prox_mu == 0.0


# ---- the coordinator sends μ with every FIT task ---------------------------------------------------

async def test_the_coordinator_sends_mu_in_the_fit_task(tmp_path, logreg_sgd):
    from coordinator_fixtures import StubClient, make_config
    from fedort.coordinator import Coordinator
    from fedort.protos.stubs import fedort_v1_pb2 as pb

    coord = Coordinator(make_config(logreg_sgd, state_dir=tmp_path / "state", prox_mu=0.1, min_clients=1))
    await coord.start()
    client = StubClient(coord.port)
    try:
        model = (await client.join("client-a")).model_id
        task = await client.poll("client-a", model)
        assert task.kind == pb.Task.FIT and task.config.prox_mu == pytest.approx(0.1)
    finally:
        await client.close()
        await coord.stop(grace=0)


async def test_a_coordinator_with_mu_refuses_adamw_artifacts(tmp_path, mlp_artifacts):
    from coordinator_fixtures import make_config
    from fedort.coordinator import Coordinator

    coord = Coordinator(make_config(mlp_artifacts, state_dir=tmp_path / "state", prox_mu=0.1))
    with pytest.raises(ConfigError, match="needs SGD artifacts, these use adamw"):
        await coord.start()
    await coord.stop(grace=0)
