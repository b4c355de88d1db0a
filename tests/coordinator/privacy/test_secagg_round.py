"""Secure aggregation end to end over real gRPC: the edge flow, the coordinator's phases, dropouts."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from fedort.coordinator import RoundState
from coordinator_fixtures import P_MLP, mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from secagg_devices import deltas_for, run_devices

SCALE = 65536.0


def _quantized_mean(deltas, ids, examples) -> np.ndarray:
    """The example-weighted mean of the deltas of `ids` as the fixed point encodes them."""
    s = sum(np.rint(np.clip(deltas[c].astype(np.float64), -1, 1) * examples[c] * SCALE) for c in ids)
    return s / SCALE / sum(examples[c] for c in ids)


async def _vectors(coord, client, cid, model):
    _, start = await client.download_vector(cid, model, 1)
    _, final = await client.download_vector(cid, model, 2)
    return start, final


@pytest.mark.slow
async def test_a_secagg_round_commits_the_fedavg_of_the_quantized_updates(start_coordinator, stub_client):
    ids = [f"dev-{i:02d}" for i in range(5)]
    coord = await start_coordinator(rounds=1, min_clients=5, secagg=True, round_timeout_s=30)
    deltas = deltas_for(ids, P_MLP)
    examples = {c: 10 + 7 * i for i, c in enumerate(ids)}
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas, None, examples)
    assert all(o == [("accepted", "accepted")] for o in outcomes.values()), outcomes
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    client = stub_client(coord.port)
    model = (await client.join(ids[0])).model_id
    start, final = await _vectors(coord, client, ids[0], model)
    expected = start.astype(np.float64) + _quantized_mean(deltas, ids, examples)
    np.testing.assert_allclose(final, expected, atol=1e-6)        # float32 rounding of g + mean only
    plain = start + sum(deltas[c] * examples[c] for c in ids) / sum(examples.values())
    np.testing.assert_allclose(final, plain, atol=2 / SCALE)     # within quantization error of plain FedAvg


async def test_keys_are_advertised_and_shared_before_any_update_exists_and_the_round_commits(start_coordinator,
                                                                                           stub_client):
    """A device may start the protocol before it trained (`SecAggFlow.run_when`): both key phases close while no
    update exists, and once the updates are there the round commits the same FedAvg."""
    from fedort.common.secagg.phases import Phase

    ids = [f"dev-{i:02d}" for i in range(4)]
    coord = await start_coordinator(rounds=1, min_clients=4, secagg=True, round_timeout_s=30)
    deltas, examples, trained = deltas_for(ids, P_MLP, seed=4), {c: 10 for c in ids}, threading.Event()
    devices = asyncio.ensure_future(asyncio.to_thread(run_devices, coord.port, deltas, None, examples,
                                                      trained=trained))
    secure = coord.engine.secagg
    for _ in range(300):
        if secure.server is not None and secure.server.phase is Phase.MASKED_INPUT:
            break
        await asyncio.sleep(0.05)
    assert secure.server.phase is Phase.MASKED_INPUT and not trained.is_set()   # keys shared, nothing trained yet
    trained.set()
    outcomes = await asyncio.wait_for(devices, 120)
    assert all(o == [("accepted", "accepted")] for o in outcomes.values()), outcomes
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    client = stub_client(coord.port)
    start, final = await _vectors(coord, client, ids[0], (await client.join(ids[0])).model_id)
    np.testing.assert_allclose(final, start.astype(np.float64) + _quantized_mean(deltas, ids, examples), atol=1e-6)


@pytest.mark.slow
async def test_a_server_optimizer_steps_from_the_unmasked_secagg_average(start_coordinator, stub_client):
    from fedort.coordinator.aggregation.server_optimizers import parse_server_optimizer

    spec = "fedadam:lr=0.01,beta1=0.9,beta2=0.99,tau=1e-3"
    ids = [f"dev-{i:02d}" for i in range(5)]
    coord = await start_coordinator(rounds=1, min_clients=5, secagg=True, round_timeout_s=30, server_optimizer=spec)
    deltas = deltas_for(ids, P_MLP)
    examples = {c: 10 + 7 * i for i, c in enumerate(ids)}
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas, None, examples)
    assert all(o == [("accepted", "accepted")] for o in outcomes.values()), outcomes
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    client = stub_client(coord.port)
    model = (await client.join(ids[0])).model_id
    start, final = await _vectors(coord, client, ids[0], model)
    combined = (start.astype(np.float64) + _quantized_mean(deltas, ids, examples)).astype(np.float32)
    expected = parse_server_optimizer(spec).apply(start, combined)
    np.testing.assert_allclose(final, expected, atol=1e-5)
    assert not np.allclose(final, combined, atol=1e-5)             # it did step, not just average


@pytest.mark.slow
@pytest.mark.parametrize("drop, counted", [("upload", "survivors"), ("unmask", "all")])
async def test_30_percent_of_20_dropping_the_round_completes(start_coordinator, stub_client, drop, counted):
    """Dropping before the masked upload: the survivors' average. After it: counted (its masks removed)."""
    ids = [f"dev-{i:02d}" for i in range(20)]
    coord = await start_coordinator(rounds=1, min_clients=20, secagg=True, round_timeout_s=4)
    deltas = deltas_for(ids, P_MLP, seed=3)
    examples = {c: 10 for c in ids}
    dropped = ids[::3][:6]
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas, {c: drop for c in dropped}, examples)
    assert all(outcomes[c][0][0] == "vanished" for c in dropped)
    assert all(outcomes[c] == [("accepted", "accepted")] for c in ids if c not in dropped), outcomes
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    client = stub_client(coord.port)
    model = (await client.join(ids[0])).model_id
    start, final = await _vectors(coord, client, ids[0], model)
    members = [c for c in ids if c not in dropped] if counted == "survivors" else ids
    np.testing.assert_allclose(final, start.astype(np.float64) + _quantized_mean(deltas, members, examples), atol=1e-6)


@pytest.mark.slow
async def test_fewer_than_t_survivors_fail_the_round_cleanly(start_coordinator, stub_client):
    ids = [f"dev-{i}" for i in range(5)]
    coord = await start_coordinator(rounds=1, min_clients=5, secagg=True, secagg_neighbours=4, secagg_threshold=3,
                                    round_timeout_s=3, max_round_attempts=1)
    deltas = deltas_for(ids, P_MLP)
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas, {c: "upload" for c in ids[:3]})
    assert all(outcomes[c][0][0] == "stale" for c in ids[3:]), outcomes
    outcome = await asyncio.wait_for(coord.wait_done(), 30)
    assert outcome.state is RoundState.FAILED and outcome.rounds_completed == 0
    assert "2 clients left after masked input, the threshold is 3" in outcome.message
    assert "global model is unchanged" in coord.engine.status().message
    assert not (coord.engine.store.vector_path(2)).exists()        # no next global vector was written


@pytest.mark.slow
async def test_an_aborted_secure_attempt_is_retried_and_the_round_commits(start_coordinator, stub_client):
    ids = [f"dev-{i}" for i in range(5)]
    coord = await start_coordinator(rounds=1, min_clients=5, secagg=True, secagg_neighbours=4, secagg_threshold=3,
                                    round_timeout_s=10, max_round_attempts=2)
    deltas = deltas_for(ids, P_MLP, seed=3)
    await asyncio.to_thread(run_devices, coord.port, deltas, {c: "upload" for c in ids[:3]})   # attempt 1 aborts
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas)                       # attempt 2: all in
    assert all(o == [("accepted", "accepted")] for o in outcomes.values()), outcomes
    outcome = await asyncio.wait_for(coord.wait_done(), 30)
    assert outcome.state is RoundState.DONE and outcome.rounds_completed == 1
    client = stub_client(coord.port)
    model = (await client.join(ids[0])).model_id
    start, final = await _vectors(coord, client, ids[0], model)
    np.testing.assert_allclose(final, start.astype(np.float64) + _quantized_mean(deltas, ids, {c: 10 for c in ids}),
                               atol=1e-6)


@pytest.mark.slow
async def test_secagg_with_dp_commits_the_clipped_deltas_over_the_expected_cohort(start_coordinator, stub_client):
    ids = [f"dev-{i}" for i in range(4)]
    coord = await start_coordinator(rounds=1, min_clients=4, secagg=True, dp_clip="0.5", round_timeout_s=30)
    deltas = deltas_for(ids, P_MLP, seed=5)                 # ‖d‖ ≈ 0.98 > 0.5: every delta is clipped on the device
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas, None, {c: 10 + i for i, c in enumerate(ids)})
    assert all(o == [("accepted", "accepted")] for o in outcomes.values()), outcomes
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    client = stub_client(coord.port)
    model = (await client.join(ids[0])).model_id
    start, final = await _vectors(coord, client, ids[0], model)
    clipped = sum(d.astype(np.float64) * 0.5 / np.linalg.norm(d.astype(np.float64)) for d in deltas.values())
    np.testing.assert_allclose(final, start + clipped / 4, atol=4 / SCALE)   # unweighted, over n_exp = 4


def test_each_device_adds_its_share_z_c_over_root_n_of_the_noise():
    from fedort.edge_client.secagg.flow import private_delta
    from fedort.common.secagg.task import SecAggTask
    from secagg_support import make_params

    task = SecAggTask(make_params(4, 10), "unit", dp_clip=0.5, dp_noise_std=1.2 * 0.5 / 2)
    g = np.zeros(200_000, np.float32)
    noise = private_delta(task, g, g, np.random.default_rng(3))
    assert noise.std() == pytest.approx(1.2 * 0.5 / 2, rel=0.02)


def test_without_dp_the_masked_delta_is_the_exact_float64_difference():
    from fedort.edge_client.secagg.flow import private_delta
    from fedort.common.secagg.task import SecAggTask
    from secagg_support import make_params

    rng = np.random.default_rng(4)
    g = rng.standard_normal(1000).astype(np.float32)
    trained = (g + rng.standard_normal(1000).astype(np.float32) * 1e-3).astype(np.float32)
    delta = private_delta(SecAggTask(make_params(4, 1000)), g, trained)
    assert delta.dtype == np.float64
    assert delta.tobytes() == (trained.astype(np.float64) - g.astype(np.float64)).tobytes()


@pytest.mark.slow
def test_simulate_with_secagg_and_distributed_dp_runs_real_edge_clients(tmp_path):
    from fedort.coordinator.privacy.accounting import epsilon
    from fedort.simulations.config import SimulationConfig
    from fedort.simulations.runner import run_simulation

    cfg = SimulationConfig.from_mapping(dict(clients=6, clients_per_round=3, rounds=2, out=tmp_path / "run", progress=False,
                           workers=2, secagg=True, dp_clip="1.0", dp_noise_multiplier=0.8))
    result = run_simulation(cfg)
    assert [r.round for r in result.records] == [1, 2] and all(r.clients == 3 for r in result.records)
    for r in result.records:                              # no dropouts: z as configured, q = 3/6
        assert r.metrics["epsilon"] == pytest.approx(epsilon(0.5, 0.8, r.round, 1e-5), rel=1e-9)
    assert "epsilon" in (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0].split(",")


@pytest.mark.slow
async def test_restarting_after_a_failed_secagg_round_runs_it_afresh(start_coordinator, stub_client, tmp_path):
    ids = [f"dev-{i}" for i in range(5)]
    settings = dict(rounds=1, min_clients=5, secagg=True, secagg_neighbours=4, secagg_threshold=3, round_timeout_s=3,
                    max_round_attempts=1)
    coord = await start_coordinator(**settings)
    deltas = deltas_for(ids, P_MLP, seed=9)
    await asyncio.to_thread(run_devices, coord.port, deltas, {c: "upload" for c in ids[:3]})
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.FAILED
    await coord.stop()
    again = await start_coordinator(**settings)              # same state dir: the round starts over
    outcomes = await asyncio.to_thread(run_devices, again.port, deltas)
    assert all(o == [("accepted", "accepted")] for o in outcomes.values()), outcomes
    assert (await asyncio.wait_for(again.wait_done(), 30)).state is RoundState.DONE
    client = stub_client(again.port)
    model = (await client.join(ids[0])).model_id
    start, final = await _vectors(again, client, ids[0], model)
    np.testing.assert_allclose(final, start.astype(np.float64) + _quantized_mean(deltas, ids, {c: 10 for c in ids}),
                               atol=1e-6)
