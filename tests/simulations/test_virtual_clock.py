"""Simulated device speeds on a virtual clock (`--device-speed`), through real simulations: in
synchronous rounds speeds change the simulated time and not the model; asynchronous runs are
reproducible and do not wait for slow devices; the number of local steps is the recipe's;
without device speeds an async simulation runs in real time over several workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedort.protos.messages import Task, TaskKind, TrainConfig
from fedort.simulations.config import SimulationConfig
from fedort.simulations.runner import run_simulation
from fedort.simulations.virtual_clock import local_steps


def _cfg(tmp: Path, **kw) -> SimulationConfig:
    base = dict(clients=6, rounds=3, partition="iid", local_epochs=1, batch_size=32, lr=0.02, progress=False,
                step_seconds=1.0, out=tmp)
    base.update(kw)
    return SimulationConfig.from_mapping(base)


def _task(epochs: int, batch: int) -> Task:
    return Task(TaskKind.FIT, 1, 0, TrainConfig(epochs, batch, 0.1, True, 0, {}, 0.0), 0, b"", 10)


@pytest.mark.parametrize("epochs, batch, examples, cap, steps", [
    (1, 32, 100, None, 4), (2, 32, 64, None, 4), (3, 0, 50, None, 3), (2, 10, 95, 5, 5)])
def test_local_steps_follow_the_recipe_and_a_stragglers_cap(epochs, batch, examples, cap, steps):
    assert local_steps(_task(epochs, batch), examples, cap) == steps


@pytest.mark.slow
def test_sync_rounds_take_the_slowest_clients_time_and_speeds_do_not_change_the_model(tmp_path):
    fast = run_simulation(_cfg(tmp_path / "fast", device_speed="slow:1:1"))
    slow = run_simulation(_cfg(tmp_path / "slow", device_speed="slow:1:5"))
    t_fast = [r.metrics["sim_seconds"] for r in fast.records]
    t_slow = [r.metrics["sim_seconds"] for r in slow.records]
    # 6 iid clients of the 1437 training digits: at most ⌈240 / 32⌉ = 8 steps of 1 s per round
    assert t_fast == pytest.approx([8.0, 16.0, 24.0])
    assert t_slow == pytest.approx([5 * t for t in t_fast])
    assert [r.accuracy for r in fast.records] == [r.accuracy for r in slow.records]


@pytest.mark.slow
def test_async_runs_on_the_virtual_clock_are_reproducible_and_slow_devices_are_stale(tmp_path):
    kw = dict(mode="async", buffer_size=2, rounds=6, device_speed="slow:0.5:10", max_staleness=20)
    a = run_simulation(_cfg(tmp_path / "a", **kw))
    b = run_simulation(_cfg(tmp_path / "b", **kw))
    assert [r.accuracy for r in a.records] == [r.accuracy for r in b.records]
    assert [r.metrics["sim_seconds"] for r in a.records] == [r.metrics["sim_seconds"] for r in b.records]
    # K = 2 of the 3 fast clients' updates make each version; the third is one version stale; the
    # slow devices' first updates (10 × 8 steps of 1 s = 80 s) are not waited for
    assert a.records[0].metrics["staleness_max"] == 0
    assert max(r.metrics["staleness_max"] for r in a.records) >= 1
    times = [r.metrics["sim_seconds"] for r in a.records]
    assert times == sorted(times) and times[-1] < 80


@pytest.mark.slow
def test_async_without_device_speeds_runs_real_edge_clients_in_several_workers(tmp_path):
    result = run_simulation(_cfg(tmp_path / "run", mode="async", buffer_size=3, rounds=4, workers=2))
    assert [r.round for r in result.records] == [1, 2, 3, 4]
    assert all(r.clients == 3 and "staleness_mean" in r.metrics and "sim_seconds" not in r.metrics
               for r in result.records)
    assert result.final["mode"] == "async" and result.records[-1].accuracy > 0.5


@pytest.mark.slow
def test_simulated_seconds_carry_no_float_dust(tmp_path):
    result = run_simulation(_cfg(tmp_path / "run", device_speed="slow:1:1", step_seconds=0.01))
    times = [r.metrics["sim_seconds"] for r in result.records]
    assert times == pytest.approx([0.08, 0.16, 0.24]) and times == [round(t, 6) for t in times]
    assert str(result.final["sim_seconds"]) == "0.24"
