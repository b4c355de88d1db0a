"""Bounds on the metrics a device reports: names, how many per report, how many a round keeps.

Metric names are client-chosen strings that end up in `state.db`, `model.json`, log lines and
every Status reply, so they are bounded where they arrive:

| what | limit | beyond it |
| --- | --- | --- |
| metrics per update or evaluation | 32 | INVALID_ARGUMENT |
| metric name | 64 bytes (UTF-8), not empty | INVALID_ARGUMENT |
| metrics a round's summary keeps | 64, those reported over the most examples | dropped from the summary |

The last bound keeps a round's summary (and so the Status reply, which carries every round's)
small however many devices report distinct names: an honest metric that every device reports
outweighs a name only a few devices send.
"""

from __future__ import annotations

from collections.abc import Mapping

from fedort.common.errors import ProtocolError

MAX_METRICS = 32
MAX_METRIC_NAME_BYTES = 64
MAX_ROUND_METRICS = 64


def check_metrics(metrics: Mapping[str, object], what: str = "an update") -> None:
    """ProtocolError (INVALID_ARGUMENT) naming the limit when `what` carries too many or too long metric names."""
    if len(metrics) > MAX_METRICS:
        raise ProtocolError(f"{what} may carry at most {MAX_METRICS} metrics, got {len(metrics)}")
    for name in metrics:
        size = len(name.encode())
        if not 0 < size <= MAX_METRIC_NAME_BYTES:
            raise ProtocolError(
                f"metric names must be 1..{MAX_METRIC_NAME_BYTES} bytes, got one of {size} "
                f"({name[:24]!r}{'…' if len(name) > 24 else ''})"
            )


def kept_names(weights: Mapping[str, float], limit: int = MAX_ROUND_METRICS) -> set[str]:
    """The `limit` names with the largest weight (Σ examples), ties broken by name."""
    if len(weights) <= limit:
        return set(weights)
    return set(sorted(weights, key=lambda k: (-weights[k], k))[:limit])


__all__ = ["MAX_METRICS", "MAX_METRIC_NAME_BYTES", "MAX_ROUND_METRICS", "check_metrics", "kept_names"]
