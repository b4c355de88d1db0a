"""Run report: metrics.csv / metrics.json round-trip, the PNG plot, the terminal summary."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from fedort.simulations.report import (
    RoundRecord, blank_figure, load_metrics, plot, rounds_to_target, summary_table, write_metrics,
)


def records(n=6):
    return [RoundRecord(round=r, accuracy=0.5 + 0.08 * r, loss=2.0 / r, clients=10, examples=1000,
                        bytes_up=384_400, bytes_down=384_400, seconds=0.5,
                        metrics={"train_loss": 1.0 / r} | ({"val_accuracy": 0.9} if r > 2 else {}))
            for r in range(1, n + 1)]


def test_metrics_csv_has_one_row_per_round_and_a_column_per_metric(tmp_path):
    csv_path, _ = write_metrics(records(), tmp_path)
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6
    assert list(rows[0])[:8] == ["round", "accuracy", "loss", "clients", "examples", "bytes_up", "bytes_down",
                                 "seconds"]
    assert float(rows[2]["accuracy"]) == pytest.approx(0.74)
    assert rows[0]["val_accuracy"] == "" and float(rows[5]["val_accuracy"]) == 0.9


def test_metrics_json_round_trips_records_and_final(tmp_path):
    recs = records()
    _, json_path = write_metrics(recs, tmp_path, final={"test_accuracy": 0.97, "model": "round-0006/model.onnx"})
    back, final = load_metrics(json_path)
    assert back == recs
    assert final == {"test_accuracy": 0.97, "model": "round-0006/model.onnx"}


def test_metrics_json_writes_missing_and_nan_values_as_null(tmp_path):
    recs = [RoundRecord(1, None, math.nan, 3, 30, 1, 1, 0.1, {"x": math.inf})]
    _, json_path = write_metrics(recs, tmp_path)
    doc = json.loads(json_path.read_text())  # strict JSON: no NaN literals
    assert doc["rounds"][0]["accuracy"] is None and doc["rounds"][0]["loss"] is None
    assert doc["rounds"][0]["metrics"] == {"x": None}


@pytest.mark.slow
def test_plot_writes_a_png_of_the_requested_size(tmp_path):
    from matplotlib.image import imread

    out = plot(records(), tmp_path / "metrics.png", "digits, 10 clients", target=0.9)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = imread(out)
    assert image.shape[:2] == (660, 880)  # 8x6 inches at 110 dpi
    assert np.std(image[..., :3]) > 0.05  # not a blank canvas


@pytest.mark.slow
def test_a_figure_made_before_the_records_exist_gives_the_same_png(tmp_path):
    """The run makes its empty figure while the rounds run, then draws on it."""
    own = plot(records(), tmp_path / "own.png", "digits, 10 clients", target=0.9)
    early = plot(records(), tmp_path / "early.png", "digits, 10 clients", target=0.9, figure=blank_figure())
    assert early.read_bytes() == own.read_bytes()


@pytest.mark.slow
def test_plot_copes_with_rounds_that_have_no_accuracy(tmp_path):
    recs = [RoundRecord(r, None, None, 1, 1, 0, 0, 0.0) for r in (1, 2)]
    assert plot(recs, tmp_path / "empty.png", "nothing evaluated").stat().st_size > 1000


def test_rounds_to_target_is_the_first_round_reaching_it():
    assert rounds_to_target(records(), 0.8) == 4  # 0.5 + 0.08 * 4 = 0.82
    assert rounds_to_target(records(), 0.99) is None


def test_summary_table_reports_best_final_target_and_totals():
    text = summary_table(records(), {"test_accuracy": 0.961, "model": "m.onnx"}, target=0.8)
    lines = dict(line.split("  ", 1) for line in text.splitlines())
    assert lines["rounds"].strip() == "6"
    assert lines["best accuracy"].strip() == "98.00% (round 6)"
    assert lines["rounds to 80.00%"].strip() == "4"
    assert lines["client updates"].strip() == "60"
    assert lines["examples trained"].strip() == "6,000"
    assert lines["bytes up / down"].strip() == "2.3 MB / 2.3 MB"
    assert lines["time"].strip() == "3.0 s (0.50 s/round)"
    assert lines["test accuracy"].strip() == "96.10%"


def test_summary_table_says_when_the_target_was_not_reached():
    assert "not reached" in summary_table(records(2), {}, target=0.99)


def test_numbered_metric_columns_are_in_numeric_order(tmp_path):
    recs = [RoundRecord(round=1, accuracy=0.5, loss=1.0, clients=3, examples=30, bytes_up=1, bytes_down=1, seconds=0.1,
                        metrics={"staleness_10": 1.0, "staleness_2": 2.0, "staleness_1": 3.0, "alpha": 0.0})]
    csv_path, _ = write_metrics(recs, tmp_path)
    header = csv_path.read_text().splitlines()[0].split(",")
    assert header[-4:] == ["alpha", "staleness_1", "staleness_2", "staleness_10"]
