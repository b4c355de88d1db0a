"""The round engine's life cycle: selection, deadlines, retries, failure, metrics, evaluation phase."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from fedort.common.clock import ManualClock, use
from fedort.coordinator import RoundState
from fedort.coordinator.engine.round_engine import IllegalTransition
from fedort.coordinator.engine.selection import client_seed, sample_size, select_clients
from coordinator_fixtures import manual_clock, mlp_artifacts, pass_the_deadline, start_coordinator, stub_client  # noqa: F401
from fedort.protos.stubs import fedort_v1_pb2 as pb
from fedort.coordinator.engine.round_engine import IllegalTransition
from fedort.coordinator.engine.selection import client_seed, sample_size, select_clients
from coordinator_fixtures import mlp_artifacts, start_coordinator, stub_client  # noqa: F401
from fedort.protos.stubs import fedort_v1_pb2 as pb


# ---- pure rules ---------------------------------------------------------------------------------

@pytest.mark.parametrize("available, fraction, min_clients, expected", [
    (10, 1.0, 2, 10), (10, 0.3, 2, 3), (10, 0.1, 2, 2), (10, 0.01, 2, 2), (1, 0.5, 2, 1), (7, 0.5, 1, 4), (0, 1.0, 2, 0),
])
def test_sample_size_is_max_of_min_and_fraction_capped_at_available(available, fraction, min_clients, expected):
    assert sample_size(available, fraction, min_clients) == expected


def test_selection_is_seeded_and_independent_of_input_order():
    ids = [f"client-{i:04d}" for i in range(20)]
    a = select_clients(ids, 5, seed=3, round=2, attempt=1)
    assert a == select_clients(list(reversed(ids)), 5, seed=3, round=2, attempt=1)
    assert a == sorted(a) and len(set(a)) == 5
    assert a != select_clients(ids, 5, seed=3, round=3, attempt=1)
    assert a != select_clients(ids, 5, seed=3, round=2, attempt=2)


def test_client_seed_differs_per_round_and_client_and_is_stable():
    # stable: another interpreter, with another string-hash seed, derives the same seed
    other = subprocess.run([sys.executable, "-c", "from fedort.coordinator.engine.selection import client_seed; "
                            "print(client_seed(0, 1, 'a'))"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONHASHSEED": "12345"}, check=True)
    assert int(other.stdout) == client_seed(0, 1, "a")
    assert len({client_seed(0, 1, "a"), client_seed(0, 2, "a"), client_seed(0, 1, "b"), client_seed(1, 1, "a")}) == 4


# ---- the engine over gRPC -----------------------------------------------------------------------

async def test_illegal_transition_raises_naming_the_state(start_coordinator):
    coord = await start_coordinator()
    assert coord.engine.state is RoundState.WAITING_FOR_CLIENTS
    with pytest.raises(IllegalTransition, match="from WAITING_FOR_CLIENTS to AGGREGATING"):
        coord.engine.transition(RoundState.AGGREGATING)


@pytest.mark.slow
async def test_fraction_selects_the_seeded_subset(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=1, min_available_clients=4, fraction=0.5, seed=11)
    client = stub_client(coord.port)
    ids = [f"client-{i:04d}" for i in range(4)]
    model = [await client.join(c) for c in ids][0].model_id
    deadline = asyncio.get_running_loop().time() + 30    # until round 1 is open with its selection (the polls'
    while not (coord.engine.state is RoundState.TRAINING and coord.engine.selected):    # 1 s hold is not a bound)
        assert asyncio.get_running_loop().time() < deadline, "round 1 did not open within 30 s"
        await asyncio.sleep(0.01)
    tasks = await asyncio.gather(*(client.poll(c, model, wait_ms=1000) for c in ids))
    fit = sorted(c for c, t in zip(ids, tasks) if t.kind == pb.Task.FIT)
    assert fit == select_clients(ids, 2, seed=11, round=1, attempt=1)


async def test_round_closes_at_the_deadline_with_min_clients(start_coordinator, stub_client, manual_clock):
    coord = await start_coordinator(min_clients=2, min_available_clients=3, round_timeout_s=600, rounds=1)
    client = stub_client(coord.port)
    model = [await client.join(c) for c in ("client-a", "client-b", "client-c")][0].model_id
    await client.fit_round("client-a", model, 1.0, 10)
    await client.fit_round("client-b", model, 3.0, 10)      # client-c never reports
    await pass_the_deadline(coord, manual_clock)
    outcome = await asyncio.wait_for(coord.wait_done(), 30)
    assert outcome.state is RoundState.DONE
    with sqlite3.connect(coord.state_dir / "state.db") as db:
        assert db.execute("SELECT clients, attempt FROM rounds WHERE round = 1").fetchone() == (2, 1)


async def test_round_without_quorum_is_retried_with_a_new_attempt(start_coordinator, stub_client):
    with use(ManualClock()) as clock:   # the round deadline passes when the test moves this clock
        await _retried_with_a_new_attempt(start_coordinator, stub_client, clock)


async def _retried_with_a_new_attempt(start_coordinator, stub_client, clock: ManualClock) -> None:
    coord = await start_coordinator(min_clients=2, round_timeout_s=30, rounds=1, max_round_attempts=3)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.fit_round("client-a", model, 1.0, 10)
    assert coord.engine.attempt == 1
    clock.advance(31)                     # attempt 1's deadline passes with 1 of 2 updates
    coord.engine.notify()                 # (the engine re-reads the clock when woken)
    deadline = asyncio.get_running_loop().time() + 30
    while coord.engine.attempt < 2 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    assert coord.engine.attempt == 2
    task, _, reply = await client.fit_round("client-b", model, 3.0, 30)   # re-selected in attempt 2
    assert reply.accepted
    outcome = await asyncio.wait_for(coord.wait_done(), 60)
    assert outcome.state is RoundState.DONE
    with sqlite3.connect(coord.state_dir / "state.db") as db:
        assert db.execute("SELECT clients, examples, attempt FROM rounds WHERE round = 1").fetchone() == (2, 40, 2)


async def test_round_fails_clearly_after_max_attempts_instead_of_hanging(start_coordinator, stub_client, manual_clock):
    coord = await start_coordinator(min_clients=2, round_timeout_s=600, rounds=2, max_round_attempts=2)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.fit_round("client-a", model, 1.0, 10)
    await pass_the_deadline(coord, manual_clock, attempt=1)
    await pass_the_deadline(coord, manual_clock, attempt=2)
    outcome = await asyncio.wait_for(coord.wait_done(), 60)
    assert outcome.state is RoundState.FAILED
    assert "round 1 failed: 1 of the required 2 clients reported after 2 attempt(s)" in outcome.message
    assert (await client.poll("client-b", model, wait_ms=0)).kind == pb.Task.DONE
    status = await client.stub.Status(pb.StatusRequest(), timeout=5)
    assert status.state == "FAILED"


async def test_sync_dist_metrics_are_example_weighted_and_others_ignored(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.fit_round("client-a", model, 0.0, 10, {"train_loss": (1.0, True), "acc": (0.5, True), "x": (7, False)})
    await client.fit_round("client-b", model, 0.0, 30, {"train_loss": (3.0, True)})
    await asyncio.wait_for(coord.wait_done(), 60)
    with sqlite3.connect(coord.state_dir / "state.db") as db:
        metrics = json.loads(db.execute("SELECT metrics FROM rounds WHERE round = 1").fetchone()[0])
    assert metrics == {"train_loss": pytest.approx(2.5), "acc": pytest.approx(0.5)}


async def test_fit_task_carries_the_training_recipe(start_coordinator, stub_client):
    coord = await start_coordinator(local_epochs=3, batch_size=16, lr=0.2, reset_optimizer=False, seed=5)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    task = await client.poll("client-a", model)
    c = task.config
    assert (c.local_epochs, c.batch_size, c.reset_optimizer) == (3, 16, False)
    assert c.learning_rate == pytest.approx(0.2) and c.seed == client_seed(5, 1, "client-a")
    assert task.deadline_unix_ms > 0


async def test_evaluation_phase_asks_clients_to_evaluate_the_final_vector(start_coordinator, stub_client):
    coord = await start_coordinator(rounds=1, fraction_evaluate=1.0)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.fit_round("client-a", model, 1.0, 10)
    await client.fit_round("client-b", model, 1.0, 10)
    for cid, acc, n in (("client-a", 0.8, 10), ("client-b", 0.5, 40)):
        task = await client.poll(cid, model)
        assert (task.kind, task.round) == (pb.Task.EVALUATE, 2)
        _, vector = await client.download_vector(cid, model, task.round)
        assert len(vector) == task.vector_length
        reply = await client.stub.SubmitEvaluation(pb.EvaluationResult(
            client_id=cid, model_id=model, round=task.round, num_examples=n,
            metrics={"val_accuracy": pb.Metric(value=acc, sync_dist=True)}), timeout=5)
        assert reply.accepted
    outcome = await asyncio.wait_for(coord.wait_done(), 60)
    assert outcome.state is RoundState.DONE
    summary = json.loads(coord.engine.store.get_meta("federated_evaluation"))
    assert summary["clients"] == 2 and summary["metrics"]["val_accuracy"] == pytest.approx(0.56)


async def test_concurrent_uploads_are_each_folded_once(start_coordinator, stub_client):
    coord = await start_coordinator(min_clients=12, rounds=1, round_timeout_s=20)
    client = stub_client(coord.port)
    ids = [f"client-{i:04d}" for i in range(12)]
    model = [await client.join(c) for c in ids][0].model_id
    results = await asyncio.gather(*(client.fit_round(c, model, float(i), i + 1) for i, c in enumerate(ids)))
    assert all(r[2].accepted for r in results)
    await asyncio.wait_for(coord.wait_done(), 60)
    _, start = await client.download_vector(ids[0], model, 1)
    _, final = await client.download_vector(ids[0], model, 2)
    weights = np.arange(1, 13, dtype=np.float64)
    np.testing.assert_allclose(final, start + (weights * np.arange(12)).sum() / weights.sum(), atol=1e-5)


@pytest.mark.slow
async def test_clients_unseen_for_client_timeout_are_not_selected(start_coordinator, stub_client):
    with use(ManualClock()) as clock:   # the registry's liveness timeout runs on a clock the test moves
        coord = await start_coordinator(min_clients=2, client_timeout_s=1.0)
        client = stub_client(coord.port)
        model = (await client.join("client-a")).model_id
        clock.advance(1.3)                                        # client-a goes quiet past the timeout
        await client.join("client-b")
        assert (await client.poll("client-b", model, wait_ms=300)).kind == pb.Task.WAIT   # only 1 available
        task = await client.poll("client-a", model, wait_ms=10_000)  # any RPC makes it available again
        assert task.kind == pb.Task.FIT


async def test_restarting_a_failed_run_retries_the_round_keeping_acknowledged_updates(start_coordinator, stub_client,
                                                                                      manual_clock):
    coord = await start_coordinator(min_clients=2, round_timeout_s=600, rounds=1, max_round_attempts=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    await client.fit_round("client-a", model, 1.0, 10)
    await pass_the_deadline(coord, manual_clock)
    assert (await asyncio.wait_for(coord.wait_done(), 60)).state is RoundState.FAILED
    await coord.stop()
    again = await start_coordinator(min_clients=2, round_timeout_s=10, rounds=1, max_round_attempts=1)
    client = stub_client(again.port)
    assert (await client.poll("client-a", model, wait_ms=200)).kind == pb.Task.WAIT   # its update was kept
    await client.fit_round("client-b", model, 3.0, 10)
    outcome = await asyncio.wait_for(again.wait_done(), 60)
    assert outcome.state is RoundState.DONE
    _, start = await client.download_vector("client-b", model, 1)
    _, final = await client.download_vector("client-b", model, 2)
    np.testing.assert_allclose(final, start + 2.0, atol=1e-6)


async def test_a_resumed_failed_round_selects_afresh_when_its_selected_client_left(start_coordinator, stub_client,
                                                                                   manual_clock):
    coord = await start_coordinator(rounds=1, min_clients=1, fraction=0.5, round_timeout_s=600, max_round_attempts=1)
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    await client.join("client-b")
    assert (await client.poll("client-a", model, wait_ms=0)).kind in (pb.Task.WAIT, pb.Task.FIT)
    for _ in range(3000):                                  # until the round opens with one of the two
        if coord.engine.selected:
            break
        await asyncio.sleep(0.01)
    (chosen,) = coord.engine.selected
    other = "client-b" if chosen == "client-a" else "client-a"
    await client.stub.Leave(pb.LeaveRequest(client_id=chosen, reason="gone"), timeout=10)
    await pass_the_deadline(coord, manual_clock)
    outcome = await asyncio.wait_for(coord.wait_done(), 30)   # nobody reports: the round (and run) fail
    assert outcome.state is RoundState.FAILED
    await coord.stop(grace=0)

    coord = await start_coordinator(rounds=1, min_clients=1, fraction=0.5, round_timeout_s=600, max_round_attempts=1)
    client = stub_client(coord.port)
    task = await client.poll(other, model, wait_ms=5000)       # not a 600 s wait for the departed client
    assert task.kind == pb.Task.FIT and task.round == 1
    assert coord.engine.selected == frozenset({other})
