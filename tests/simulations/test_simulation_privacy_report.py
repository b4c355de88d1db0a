"""A differentially private simulation's summary says the final epsilon and why the run ended."""

from __future__ import annotations

import pytest

from fedort.coordinator.privacy.accounting import epsilon_for_rounds
from fedort.simulations.config import SimulationConfig
from fedort.simulations.runner import run_simulation


@pytest.mark.slow
def test_the_summary_shows_the_final_epsilon_and_that_the_budget_stopped_the_run(tmp_path):
    two, three = (epsilon_for_rounds([(0.5, 1.1)] * k, 1e-5) for k in (2, 3))
    result = run_simulation(SimulationConfig.from_mapping(dict(clients=4, fraction=0.5, rounds=10, partition="iid", dp_clip="1.0",
                                             dp_noise_multiplier=1.1, dp_target_epsilon=(two + three) / 2,
                                             progress=False, workers=1, out=tmp_path / "run")))
    assert len(result.records) == 2
    assert result.final["epsilon"] == pytest.approx(two, rel=1e-3)
    assert "privacy budget: stopped before round 3" in result.final["ended"]
    lines = result.summary.splitlines()
    assert any(line.startswith("epsilon") for line in lines) and any(line.startswith("ended") for line in lines)
