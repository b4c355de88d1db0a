"""`--server-optimizer` as the pipeline's server-update stage, through a real coordinator over gRPC:
it consumes whatever the combiner produced, its state is committed with each round and restored on
restart, a restart with another spec is refused, and fedavg stays the stateless identity."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from fedort.coordinator import Coordinator, RoundState
from fedort.coordinator.aggregation import ServerUpdate, WeightedSum
from fedort.coordinator.aggregation.server_optimizers import parse_server_optimizer
from fedort.coordinator.aggregation.server_optimizers.stage import ServerOptimizerStage, configured_strategy
from fedort.coordinator.state.layout import StateLayout
from coordinator_fixtures import P_MLP, make_config, mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.common.errors import ConfigError

ADAM = "fedadam:lr=0.05,beta1=0.9,beta2=0.99,tau=1e-3"


async def _run_rounds(client, model: str, rounds: int, deltas: dict[str, float]) -> list[np.ndarray]:
    """Each round every client sends its round's vector + its delta (3 examples each); the vectors it saw."""
    seen = []
    for _ in range(rounds):
        for i, (cid, delta) in enumerate(deltas.items()):
            _, vector, reply = await client.fit_round(cid, model, delta, 3)
            assert reply.accepted
            if i == 0:
                seen.append(vector)
    return seen


async def _final(client, cid: str, model: str, round: int) -> np.ndarray:
    return (await client.download_vector(cid, model, round))[1]


async def test_fedadam_steps_the_mean_of_each_round_as_the_numpy_reference_does(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=2, rounds=2, server_optimizer=ADAM)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    seen = await _run_rounds(client, model, 2, {"client-a": 1.0, "client-b": 3.0})
    assert (await asyncio.wait_for(coord.wait_done(), 20)).state is RoundState.DONE
    reference = parse_server_optimizer(ADAM)
    after_one = reference.apply(seen[0], _mean(seen[0], 1.0, 3.0))
    np.testing.assert_array_equal(seen[1], after_one)
    np.testing.assert_array_equal(await _final(client, "client-a", model, 3),
                                  reference.apply(seen[1], _mean(seen[1], 1.0, 3.0)))


def _mean(x: np.ndarray, *deltas: float) -> np.ndarray:
    """What the FedAvg combiner produces from equally weighted updates x + delta (float64 sum, rounded once)."""
    total = WeightedSum(len(x), np.dtype(np.float64))
    for d in deltas:
        total.add((x + np.float32(d)).astype(np.float32), 3)
    return total.mean()


async def test_the_optimizer_consumes_a_robust_combiners_output(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=3, rounds=1, strategy="median", server_optimizer="fedavgm:lr=0.5")
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.join("client-c")
    (start,) = await _run_rounds(client, model, 1, {"client-a": 1.0, "client-b": 2.0, "client-c": 100.0})
    assert (await asyncio.wait_for(coord.wait_done(), 20)).state is RoundState.DONE
    # median = start + 2, Δ = −2, m = Δ, x' = start − 0.5·m = start + 1 (the outlier is ignored)
    np.testing.assert_allclose(await _final(client, "client-a", model, 2), start + 1.0, atol=1e-5)


@pytest.mark.slow
async def test_its_state_is_committed_with_each_round_and_restored_on_restart(tmp_path, mlp_artifacts, stub_client):
    state_dir = tmp_path / "state"
    coord = Coordinator(make_config(mlp_artifacts, state_dir, min_clients=2, rounds=1, server_optimizer=ADAM))
    try:
        await coord.start()
        client = stub_client(coord.port)
        model = (await client.join("client-a")).model_id
        await client.join("client-b")
        await _run_rounds(client, model, 1, {"client-a": 1.0, "client-b": 3.0})
        assert (await asyncio.wait_for(coord.wait_done(), 20)).state is RoundState.DONE
        moments = {k: v.copy() for k, v in coord.engine.strategy.server_update.optimizer.state().items()
                   if isinstance(v, np.ndarray)}
    finally:
        await asyncio.wait_for(coord.stop(grace=0), 20)
    layout = StateLayout(state_dir)
    assert layout.server_state(2).is_file() and not layout.server_state(1).exists()
    again = Coordinator(make_config(mlp_artifacts, state_dir, min_clients=2, rounds=2, server_optimizer=ADAM))
    try:
        await again.start()
        stage = again.engine.strategy.server_update
        assert again.engine.round == 2 and stage.step == 1
        for name, array in moments.items():
            np.testing.assert_array_equal(stage.optimizer.state()[name], array)
    finally:
        await asyncio.wait_for(again.stop(grace=0), 20)


@pytest.mark.slow
async def test_a_restart_with_another_server_optimizer_is_refused_naming_both(tmp_path, mlp_artifacts, stub_client):
    state_dir = tmp_path / "state"
    coord = Coordinator(make_config(mlp_artifacts, state_dir, min_clients=2, rounds=1, server_optimizer=ADAM))
    try:
        await coord.start()
        client = stub_client(coord.port)
        model = (await client.join("client-a")).model_id
        await client.join("client-b")
        await _run_rounds(client, model, 1, {"client-a": 1.0, "client-b": 3.0})
        assert (await asyncio.wait_for(coord.wait_done(), 20)).state is RoundState.DONE
    finally:
        await asyncio.wait_for(coord.stop(grace=0), 20)
    again = Coordinator(make_config(mlp_artifacts, state_dir, min_clients=2, rounds=2, server_optimizer="fedyogi"))
    try:
        with pytest.raises(ConfigError, match=r"holds the state of server optimizer 'fedadam:.*', but this run uses "
                                              r"'fedyogi:"):
            await again.start()
    finally:
        await asyncio.wait_for(again.stop(grace=0), 20)


def test_fedavg_is_the_stateless_identity_and_others_wrap_the_optimizer(tmp_path):
    config = make_config(tmp_path, tmp_path / "s")
    assert type(configured_strategy(config).server_update) is ServerUpdate
    stage = configured_strategy(make_config(tmp_path, tmp_path / "s", strategy="clip:5",
                                            server_optimizer="fedyogi")).server_update
    assert isinstance(stage, ServerOptimizerStage) and str(stage).startswith("fedyogi:lr=0.01")


@pytest.mark.slow
async def test_each_exported_round_records_the_optimizer_spec_and_how_far_it_moved(start_coordinator, stub_client,
                                                                                    tmp_path):
    coord = await start_coordinator(min_clients=2, rounds=1, server_optimizer="fedavgm:lr=0.5,momentum=0.9")
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await _run_rounds(client, model, 1, {"client-a": 1.0, "client-b": 3.0})
    assert (await asyncio.wait_for(coord.wait_done(), 20)).state is RoundState.DONE
    record = json.loads(StateLayout(tmp_path / "state").model_record(1).read_text())
    assert record["training_config"]["server_optimizer"] == "fedavgm:lr=0.5,momentum=0.9"
    # Δ = −2 in each of P coordinates; the step is 0.5·Δ
    assert record["metrics"]["server_pseudo_gradient_norm"] == pytest.approx(2 * np.sqrt(P_MLP), rel=1e-5)
    assert record["metrics"]["server_step_norm"] == pytest.approx(np.sqrt(P_MLP), rel=1e-5)
