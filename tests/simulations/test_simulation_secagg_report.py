"""A secure-aggregation simulation reports what travelled: the masked words' bytes and codec."""

from __future__ import annotations

import csv
import json

import pytest

from fedort.coordinator.state.layout import StateLayout
from fedort.simulations.config import SimulationConfig
from fedort.simulations.runner import run_simulation


@pytest.mark.slow
def test_metrics_and_summary_report_the_masked_uploads_bytes_and_codec(tmp_path):
    result = run_simulation(SimulationConfig.from_mapping(dict(clients=4, rounds=2, partition="iid", secagg=True, progress=False,
                                             workers=1, out=tmp_path / "run")))
    layout = StateLayout(result.out / "state")
    with open(result.out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        record = json.loads(layout.model_record(int(row["round"])).read_text())
        assert row["codec"] == record["codecs"][0] and row["codec"].startswith("secagg-packed:")
        assert int(row["bytes_up"]) == record["bytes_up"]   # P + 1 packed words per client, not P float32s
    assert result.final["codec"] == rows[-1]["codec"]
    assert any(line.split() == ["codec", rows[-1]["codec"]] for line in result.summary.splitlines()), result.summary
