"""Central DP wired into the pipeline: clipping, noise scale, ε per round from the accountant, target-ε stop."""

from __future__ import annotations

import asyncio
import json

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp

from fedort.coordinator import RoundState
from fedort.coordinator.aggregation import Strategy, Update
from fedort.coordinator.privacy.dp_fedavg import DPClip, DPClipState, DPClipUpdate, NoisedSum
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.state.layout import StateLayout
from fedort.common.errors import ConfigError
from coordinator_fixtures import mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.protos.stubs import fedort_v1_pb2 as pb


def _dp_strategy(state: DPClipState) -> Strategy:
    return Strategy("dp-fedavg", NoisedSum(state), [DPClip(state)], DPClipUpdate(state))


def _update(i: int, vector: np.ndarray, tmp_path) -> Update:
    return Update(f"c{i}", 10, "raw", tmp_path / f"c{i}", payload=vector.astype(np.float32))


def test_each_delta_is_clipped_to_c_and_the_sum_divided_by_the_expected_cohort(tmp_path):
    state = DPClipState(noise_multiplier=0.0, clip=0.5)
    state.open_round(expected_clients=4)                  # 4 expected, 2 arrive: the denominator stays 4
    g = np.zeros(100, dtype=np.float32)
    agg = _dp_strategy(state).new_round(g)
    big = np.full(100, 1.0, dtype=np.float32)             # ‖d‖ = 10 -> scaled to 0.5
    small = np.zeros(100, dtype=np.float32); small[0] = 0.2
    agg.add(_update(0, big, tmp_path)); agg.add(_update(1, small, tmp_path))
    expected = (big * 0.05 + small) / 4
    np.testing.assert_allclose(agg.result().vector, expected, atol=1e-6)
    assert state.unclipped == 1


def test_noise_on_the_sum_has_std_z_c_over_the_expected_cohort(tmp_path):
    state = DPClipState(noise_multiplier=2.0, clip=0.5, rng=np.random.default_rng(7))
    state.open_round(expected_clients=4)
    g = np.full(200_000, 0.25, dtype=np.float32)
    agg = _dp_strategy(state).new_round(g)
    for i in range(4):
        agg.add(_update(i, g, tmp_path))                   # zero deltas: the result is g + noise / n_exp
    noise = agg.result().vector.astype(np.float64) - g
    assert abs(noise.mean()) < 0.01
    assert noise.std() == pytest.approx(2.0 * 0.5 / 4, rel=0.02)


def test_adaptive_clip_state_round_trips_through_the_server_state(tmp_path):
    state = DPClipState(noise_multiplier=1.0, clip=0.1, adaptive_quantile=0.5, rng=np.random.default_rng(1))
    state.open_round(20)
    update = DPClipUpdate(state)
    update.apply(np.zeros(3, np.float32), np.zeros(3, np.float32))   # 0 of 20 within C: C grows
    saved = update.state()
    assert saved["clip"][0] > 0.1
    other = DPClipState(noise_multiplier=1.0, clip=0.1, adaptive_quantile=0.5)
    DPClipUpdate(other).load_state(saved)
    assert other.current_clip == saved["clip"][0]


def test_dp_with_a_robust_strategy_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="DP-FedAvg"):
        CoordinatorConfig.from_mapping(dict(artifacts=tmp_path, state_dir=tmp_path / "s", strategy="median", dp_clip="1.0"))


def _direct_epsilon(q: float, z: float, rounds: int, delta: float) -> float:
    accountant = rdp.RdpAccountant()
    accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), rounds)
    return accountant.get_epsilon(delta)


async def _serve_rounds(coord, client, ids, model) -> None:
    """Every client polls; the selected ones train (+0.01) until the run ends."""
    while coord.state not in (RoundState.DONE, RoundState.FAILED):
        for c in ids:
            task = await client.poll(c, model, wait_ms=50)
            if task.kind == pb.Task.FIT:
                _, vector = await client.download_vector(c, model, task.round)
                await client.submit(c, model, task.round, vector + np.float32(0.01), 10)
            elif task.kind == pb.Task.DONE:
                return


@pytest.mark.slow
async def test_epsilon_per_round_equals_the_accountant_called_directly(start_coordinator, stub_client, tmp_path):
    coord = await start_coordinator(rounds=3, min_clients=2, min_available_clients=4, fraction=0.5,
                                    dp_clip="1.0", dp_noise_multiplier=1.1, dp_delta=1e-5)
    client = stub_client(coord.port)
    ids = [f"client-{i}" for i in range(4)]
    model = [await client.join(c) for c in ids][0].model_id
    await asyncio.wait_for(_serve_rounds(coord, client, ids, model), 60)
    outcome = await asyncio.wait_for(coord.wait_done(), 60)
    assert outcome.state is RoundState.DONE
    status = coord.engine.status()
    for row in status.rounds:                              # q = cohort 2 / population 4
        assert row.metrics["dp_sampling_rate"] == 0.5
        assert row.metrics["epsilon"] == pytest.approx(_direct_epsilon(0.5, 1.1, row.round, 1e-5), rel=1e-9)
        record = json.loads(StateLayout(tmp_path / "state").model_record(row.round).read_text())
        assert record["metrics"]["epsilon"] == row.metrics["epsilon"]


@pytest.mark.slow
async def test_target_epsilon_stops_before_the_round_that_would_exceed_it(start_coordinator, stub_client):
    target = (_direct_epsilon(0.5, 1.1, 2, 1e-5) + _direct_epsilon(0.5, 1.1, 3, 1e-5)) / 2   # 2 rounds fit
    coord = await start_coordinator(rounds=10, min_clients=2, min_available_clients=4, fraction=0.5,
                                    dp_clip="1.0", dp_noise_multiplier=1.1, dp_target_epsilon=target)
    client = stub_client(coord.port)
    ids = [f"client-{i}" for i in range(4)]
    model = [await client.join(c) for c in ids][0].model_id
    await asyncio.wait_for(_serve_rounds(coord, client, ids, model), 60)
    outcome = await asyncio.wait_for(coord.wait_done(), 60)
    assert outcome.state is RoundState.DONE and outcome.rounds_completed == 2
    assert "stopped before round 3" in outcome.message and "target" in outcome.message
    assert "privacy budget" in coord.engine.status().message
