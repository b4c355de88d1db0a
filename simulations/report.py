"""The run report of a simulation: per-round records, metrics files, a plot and a terminal summary.

A run writes `metrics.csv` (one row per round, for spreadsheets and pandas), `metrics.json`
(the same rows plus the final results) and `metrics.png` (accuracy and loss per round).
Accuracies are fractions in [0, 1]; they are shown as percentages.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeGuard, cast

CSV_FILE = "metrics.csv"
JSON_FILE = "metrics.json"


@dataclass
class RoundRecord:
    """What one round did: its global test accuracy/loss (None if not evaluated) and its costs."""

    round: int
    accuracy: float | None
    loss: float | None
    clients: int
    examples: int
    bytes_up: int
    bytes_down: int
    seconds: float
    metrics: dict[str, float] = field(default_factory=dict)  # e.g. aggregated train_loss
    codec: str = ""  # the update codec(s) the round's accepted updates used ("+"-joined)


_FIXED = [f.name for f in fields(RoundRecord) if f.name != "metrics"]


def write_metrics(
    records: Sequence[RoundRecord], out_dir: str | Path, final: dict[str, Any] | None = None
) -> tuple[Path, Path]:
    """Write metrics.csv and metrics.json into `out_dir`; returns both paths.

    The CSV has the fixed columns, then one column per extra metric name (sorted, numbers in names
    by value: staleness_2 before staleness_10; empty where a round lacks it). The JSON is
    `{"rounds": [...], "final": {...}}`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    extra = sorted({k for r in records for k in r.metrics}, key=natural_key)
    csv_path = out / CSV_FILE
    with csv_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(_FIXED + [k if k not in _FIXED else f"metrics.{k}" for k in extra])
        for r in records:
            row = [_cell(getattr(r, name)) for name in _FIXED]
            writer.writerow(row + [_cell(r.metrics.get(k)) for k in extra])
    json_path = out / JSON_FILE
    doc = {"rounds": [_finite(asdict(r)) for r in records], "final": _finite(dict(final or {}))}
    json_path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return csv_path, json_path


def natural_key(name: str) -> tuple:
    """Sort key that orders the numbers inside a name by value (`staleness_2` < `staleness_10`)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part)


def load_metrics(path: str | Path) -> tuple[list[RoundRecord], dict[str, Any]]:
    """Read a metrics.json back: (records, final)."""
    doc = json.loads(Path(path).read_text())
    return [RoundRecord(**r) for r in doc["rounds"]], doc.get("final", {})


def blank_figure() -> Any:
    """The report's empty figure: its size, margins and two axes, none of which depend on the records.

    Made before the run ends (in a thread while rounds run, a third of the plot's time), then
    handed to `plot`, which draws the same PNG it would draw on a figure it made itself."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # Agg: no display needed
    from matplotlib.figure import Figure

    # fixed margins for this fixed size: constrained layout measures every tick label (half the drawing time)
    fig = Figure(figsize=(8, 6), dpi=110)
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.08, top=0.93, hspace=0.06)
    FigureCanvasAgg(fig)
    fig.subplots(2, 1, sharex=True)
    return fig


def plot(
    records: Sequence[RoundRecord], out_png: str | Path, title: str, target: float | None = None, figure: Any = None
) -> Path:
    """Accuracy (top) and loss (bottom) per round as a PNG; `target` draws a dashed accuracy line.

    `figure`: an unused `blank_figure()` to draw on (default: a new one)."""
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    fig = figure if figure is not None else blank_figure()
    ax_acc, ax_loss = fig.axes
    acc = [(r.round, r.accuracy) for r in records if _present(r.accuracy)]
    loss = [(r.round, r.loss) for r in records if _present(r.loss)]

    if acc:
        xs, ys = zip(*acc)
        best = max(acc, key=lambda p: p[1])
        ax_acc.plot(
            xs,
            [100 * y for y in ys],
            marker="o",
            markersize=3,
            color="tab:blue",
            label=f"accuracy (best {100 * best[1]:.1f}% in round {best[0]})",
        )
        ax_acc.plot([best[0]], [100 * best[1]], marker="*", markersize=11, color="tab:orange", linestyle="none")
    if target is not None:
        hit = rounds_to_target(records, target)
        reached = f", reached in round {hit}" if hit is not None else ", not reached"
        ax_acc.axhline(
            100 * target, color="gray", linestyle="--", linewidth=1, label=f"target {100 * target:g}%{reached}"
        )
        if hit is not None:
            ax_acc.axvline(hit, color="gray", linestyle=":", linewidth=1)
    ax_acc.yaxis.set_major_formatter(PercentFormatter(decimals=0))
    ax_acc.set_ylabel("accuracy")
    ax_acc.grid(alpha=0.3)
    if acc or target is not None:
        ax_acc.legend(loc="lower right", fontsize=9)
    else:
        ax_acc.text(0.5, 0.5, "no accuracy recorded", ha="center", va="center", transform=ax_acc.transAxes)

    if loss:
        xs, ys = zip(*loss)
        ax_loss.plot(xs, ys, marker="o", markersize=3, color="tab:red", label="loss")
        ax_loss.legend(loc="upper right", fontsize=9)
    else:
        ax_loss.text(0.5, 0.5, "no loss recorded", ha="center", va="center", transform=ax_loss.transAxes)
    ax_loss.set_ylabel("loss")
    ax_loss.set_xlabel("round")
    ax_loss.grid(alpha=0.3)
    ax_loss.xaxis.set_major_locator(MaxNLocator(integer=True))
    if records:
        rounds = [r.round for r in records]
        ax_loss.set_xlim(min(rounds) - 0.5, max(rounds) + 0.5)
    fig.suptitle(title)

    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png)
    return out_png


def rounds_to_target(records: Sequence[RoundRecord], target: float) -> int | None:
    """The first round whose accuracy reached `target`, or None if none did."""
    return next((r.round for r in records if _present(r.accuracy) and r.accuracy >= target), None)


def summary_table(
    records: Sequence[RoundRecord], final: dict[str, Any] | None = None, target: float | None = None
) -> str:
    """A two-column text table for the terminal: accuracy, rounds to target, totals, then `final`."""
    rows: list[tuple[str, str]] = [("rounds", str(len(records)))]
    acc = [r for r in records if _present(r.accuracy)]
    if acc:
        best = max(acc, key=lambda r: cast(float, r.accuracy))  # present: filtered above
        rows.append(("best accuracy", f"{_pct(cast(float, best.accuracy))} (round {best.round})"))
        rows.append(("final accuracy", f"{_pct(cast(float, acc[-1].accuracy))} (round {acc[-1].round})"))
    if target is not None:
        hit = rounds_to_target(records, target)
        rows.append((f"rounds to {_pct(target)}", str(hit) if hit is not None else "not reached"))
    losses = [r for r in records if _present(r.loss)]
    if losses:
        rows.append(("final loss", f"{losses[-1].loss:.4f}"))
    if records:
        seconds = sum(r.seconds for r in records)
        rows += [
            ("client updates", f"{sum(r.clients for r in records):,}"),
            ("examples trained", f"{sum(r.examples for r in records):,}"),
            (
                "bytes up / down",
                f"{_bytes(sum(r.bytes_up for r in records))} / {_bytes(sum(r.bytes_down for r in records))}",
            ),
            ("time", f"{seconds:.1f} s ({seconds / len(records):.2f} s/round)"),
        ]
    for key, value in (final or {}).items():
        rows.append((key.replace("_", " "), _pct(value) if "accuracy" in key and _present(value) else str(value)))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _present(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _pct(value: float) -> str:
    return f"{100 * value:.2f}%"


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def _cell(value: Any) -> Any:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return value


def _finite(obj: Any) -> Any:
    """JSON has no NaN/inf: write them as null so every JSON parser reads the file."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


__all__ = [
    "RoundRecord",
    "write_metrics",
    "load_metrics",
    "plot",
    "summary_table",
    "rounds_to_target",
    "CSV_FILE",
    "JSON_FILE",
]
