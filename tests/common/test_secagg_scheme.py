"""The secure-aggregation scheme (mask PRG + Shamir field) is negotiated, echoed and enforced, and the
masked sum stays exact under the newer scheme (aes128ctr-p130)."""

from __future__ import annotations

import asyncio
import json
import os

import grpc
import numpy as np
import pytest

from fedort.coordinator import RoundState
from fedort.coordinator.privacy.secagg.server import SecAggServer
from fedort.edge_client.secagg.client import SecAggClient
from fedort.edge_client.secagg.flow import SecAggFlow
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.protos.messages import Task, TaskKind
from fedort.common.secagg import AdvertiseKeys, SecAggParams
from fedort.common.secagg.errors import SchemeError
from fedort.common.secagg.scheme import AES_PRIME, AES_PRIME_W32, CAPABILITY, COMMITTED, LEGACY, SUPPORTED, negotiate
from fedort.common.secagg.task import SecAggTask
from coordinator_fixtures import P_MLP, mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from secagg_devices import CURRENT, OLD, deltas_for, run_devices
from secagg_support import make_params, quantized_sum, run_round

NEW = {CAPABILITY: ",".join(SUPPORTED)}


def _updates(params, seed=0):
    rng = np.random.default_rng(seed)
    return {c: rng.normal(0.0, 0.3, params.length) for c in params.cohort}


def test_negotiation_picks_the_newest_scheme_every_device_announced():
    assert negotiate([NEW, NEW]) == COMMITTED
    assert negotiate([NEW, {CAPABILITY: f"{AES_PRIME_W32},{AES_PRIME}"}]) == AES_PRIME_W32   # a device before 1.8
    assert negotiate([NEW, {CAPABILITY: AES_PRIME}]) == AES_PRIME     # a 1.3 device without 32-bit words
    assert negotiate([NEW, {}]) == LEGACY                           # a device before protocol 1.3
    assert negotiate([NEW, {CAPABILITY: f"{LEGACY},some-future-scheme"}]) == LEGACY
    assert negotiate([{CAPABILITY: "some-future-scheme," + AES_PRIME}]) == AES_PRIME
    assert negotiate([]) == COMMITTED


@pytest.mark.slow
@pytest.mark.parametrize("scheme, scale, wide", [(AES_PRIME, 2.0**16, False), (AES_PRIME_W32, 2.0**16, False),
                                                 (AES_PRIME_W32, 2.0**30, True)])
def test_masked_sum_equals_the_plain_quantized_sum_exactly_under_aes_and_prime_shares(scheme, scale, wide):
    """aes128ctr32-p130 reads 32-bit mask words when b <= 32 and 64-bit ones above: exact either way."""
    params = make_params(20, 3000, degree=12, scheme=scheme, scale=scale)
    assert (params.fixed_point.bits > 32) is wide
    updates = _updates(params, 5)
    dropped, late = params.cohort[::9][:2], params.cohort[1:2]       # before upload: left out; after: counted
    result = run_round(params, updates, drop_before_upload=dropped, drop_before_unmask=late)
    survivors = [c for c in params.cohort if c not in dropped]
    expected = quantized_sum(params, updates, survivors)
    assert np.array_equal(params.fixed_point.to_signed(expected)[:-1],
                          np.rint(result.weighted_sum * params.fixed_point.scale).astype(np.int64))
    assert result.weight_sum == len(survivors)


def test_a_device_computing_another_scheme_is_refused_before_it_joins_the_protocol():
    params = make_params(5, 10, scheme=AES_PRIME)
    server = SecAggServer(params)
    old = SecAggClient(params.cohort[0], params).advertise()
    with pytest.raises(SchemeError, match="protocol >= 1.3") as e:
        server.receive_keys(AdvertiseKeys(old.client_id, old.cipher_public, old.mask_public))   # no echo: an old device
    assert e.value.code == "FAILED_PRECONDITION"
    with pytest.raises(SchemeError, match=LEGACY.replace("^", r"\^")):
        server.receive_keys(AdvertiseKeys(old.client_id, old.cipher_public, old.mask_public, LEGACY))
    server.receive_keys(old)                                          # the echo of this round's scheme is accepted
    legacy = SecAggServer(make_params(5, 10))
    legacy.receive_keys(AdvertiseKeys(old.client_id, old.cipher_public, old.mask_public))   # old device, old scheme


def test_a_device_asked_for_an_unknown_scheme_ends_the_round_as_stale_without_a_step():
    params = json.loads(make_params(3, 10, scheme=AES_PRIME).to_bytes())
    params["scheme"] = "some-future-scheme"
    task_bytes = json.dumps({"params": params, "weighting": "unit", "dp_clip": None, "dp_noise_std": 0.0}).encode()
    with pytest.raises(SchemeError, match="some-future-scheme"):
        SecAggTask.from_bytes(task_bytes)

    looked_up: list[str] = []

    class NoTransport:                       # any call the device tried would fail on a missing method
        def __getattr__(self, name):
            looked_up.append(name)
            raise AttributeError(name)

    task = Task(TaskKind.FIT, 1, secagg=task_bytes)
    outcome, message = SecAggFlow(NoTransport(), params["cohort"][0], "m", task, lambda what, fn: fn()).run(
        np.zeros(10, np.float32), np.ones(10, np.float32), 1, {}, 1 << 20)
    assert outcome == "stale" and "not supported" in message
    assert "secagg_step" not in looked_up and "submit_update" not in looked_up


async def _secagg_round(coord, stub_client, ids, capabilities):
    """Join `ids` with `capabilities` each, poll their FIT tasks; (client, model id, tasks by id)."""
    client = stub_client(coord.port)
    model = ""
    for c in ids:
        reply = await client.stub.Join(pb.JoinRequest(device_name="t", client_id=c, capabilities=capabilities[c]))
        model = reply.model_id
    tasks = {c: await client.poll(c, model) for c in ids}
    assert all(t.kind == pb.Task.FIT and t.secagg for t in tasks.values())
    return client, model, tasks


@pytest.mark.slow
async def test_an_old_device_under_the_new_scheme_gets_failed_precondition_naming_what_it_needs(
        start_coordinator, stub_client):
    ids = ["dev-a", "dev-b", "dev-c"]
    coord = await start_coordinator(rounds=1, min_clients=3, secagg=True, round_timeout_s=30)
    client, model, tasks = await _secagg_round(coord, stub_client, ids, {c: NEW for c in ids})
    params = SecAggParams.from_dict(json.loads(tasks["dev-a"].secagg)["params"])
    assert params.scheme == COMMITTED
    keys = AdvertiseKeys("dev-a", os.urandom(32), os.urandom(32))      # what a pre-1.3 device sends: no scheme
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await client.stub.SecAgg(pb.SecAggRequest(client_id="dev-a", model_id=model, round=tasks["dev-a"].round,
                                                  step=pb.SecAggRequest.ADVERTISE, payload=keys.to_bytes(), wait_ms=0))
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert COMMITTED in e.value.details() and "protocol >= 1.8" in e.value.details()


@pytest.mark.slow
async def test_a_cohort_with_an_old_device_runs_the_legacy_scheme_and_sums_exactly(start_coordinator, stub_client):
    ids = [f"dev-{i:02d}" for i in range(5)]
    coord = await start_coordinator(rounds=1, min_clients=5, secagg=True, round_timeout_s=30)
    deltas = deltas_for(ids, P_MLP, seed=7)
    caps = {c: (OLD if c == ids[2] else CURRENT) for c in ids}
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas, None, {c: 10 for c in ids}, 1, None, caps)
    assert all(o == [("accepted", "accepted")] for o in outcomes.values()), outcomes
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    state = (coord.config.state_dir / "secagg" / "round-0001.state").read_bytes()[8:]
    assert json.loads(state)["params"]["scheme"] == LEGACY
    client = stub_client(coord.port)
    model = (await client.join(ids[0])).model_id
    _, start = await client.download_vector(ids[0], model, 1)
    _, final = await client.download_vector(ids[0], model, 2)
    mean = sum(np.rint(np.clip(deltas[c].astype(np.float64), -1, 1) * 10 * 65536.0) for c in ids) / 65536.0 / 50
    np.testing.assert_allclose(final, start.astype(np.float64) + mean, atol=1e-6)


@pytest.mark.slow
async def test_a_cohort_of_current_devices_runs_the_new_scheme(start_coordinator):
    ids = [f"dev-{i:02d}" for i in range(4)]
    coord = await start_coordinator(rounds=1, min_clients=4, secagg=True, round_timeout_s=30)
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas_for(ids, P_MLP), None, None)
    assert all(o == [("accepted", "accepted")] for o in outcomes.values()), outcomes
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    state = (coord.config.state_dir / "secagg" / "round-0001.state").read_bytes()[8:]
    assert json.loads(state)["params"]["scheme"] == COMMITTED


@pytest.mark.slow
async def test_the_weight_bound_is_the_cohorts_announced_examples_and_a_larger_count_is_clamped(
        start_coordinator, stub_client):
    """Under the newer scheme b is sized for the largest example count the cohort announced (smaller
    uploads); a device training on more examples than any announced counts with that largest one."""
    ids = [f"dev-{i}" for i in range(4)]
    announced, trained_on = dict(zip(ids, (5, 9, 12, 3))), dict(zip(ids, (5, 9, 12, 40)))
    coord = await start_coordinator(rounds=1, min_clients=4, secagg=True, round_timeout_s=30)
    deltas = deltas_for(ids, P_MLP, seed=13)
    caps = {c: {**CURRENT, "examples": str(announced[c])} for c in ids}
    outcomes = await asyncio.to_thread(run_devices, coord.port, deltas, None, trained_on, 1, None, caps)
    assert all(o == [("accepted", "accepted")] for o in outcomes.values()), outcomes
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state is RoundState.DONE
    params = json.loads((coord.config.state_dir / "secagg" / "round-0001.state").read_bytes()[8:])["params"]
    assert params["fixed_point"]["max_weight"] == 12.0 and params["fixed_point"]["bits"] == 24   # 40 with 65,536
    weights = {c: min(trained_on[c], 12) for c in ids}
    client = stub_client(coord.port)
    model = (await client.join(ids[0])).model_id
    _, start = await client.download_vector(ids[0], model, 1)
    _, final = await client.download_vector(ids[0], model, 2)
    mean = sum(np.rint(np.clip(deltas[c].astype(np.float64), -1, 1) * weights[c] * 65536.0) for c in ids) \
        / 65536.0 / sum(weights.values())
    np.testing.assert_allclose(final, start.astype(np.float64) + mean, atol=1e-6)


def test_weight_cap_is_the_largest_announced_count_or_the_maximum_if_one_is_missing():
    from fedort.common.secagg.task import MAX_WEIGHT, weight_cap

    assert weight_cap([{"examples": "7"}, {"examples": "30"}]) == 30.0
    assert weight_cap([{"examples": "7"}, {}]) == weight_cap([{"examples": "x"}]) == MAX_WEIGHT
    assert weight_cap([{"examples": str(10**9)}]) == MAX_WEIGHT
