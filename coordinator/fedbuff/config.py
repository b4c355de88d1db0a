"""The asynchronous-mode (FedBuff) settings shared by `coordinator serve` and `simulate`, declared once.

| key | default | meaning |
| --- | --- | --- |
| mode | sync | `sync`: rounds; `async`: FedBuff versions (coordinator.async_engine), `rounds` = versions to commit |
| buffer_size | 10 | async: updates folded into each new global version (K) |
| max_staleness | 10 | async: updates trained on a version more than this many behind are refused (S) |
| staleness_weight | poly:0.5 | async: weight of an update s versions stale: constant, poly:A, hinge:A,B (coordinator.staleness) |

The flags are in `fedort.cli.async_flags`; each config checks the values against its own context.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class AsyncSettings:
    """The fields above: `CoordinatorConfig` and `SimulationConfig` inherit them (same keys, same defaults)."""

    mode: str = "sync"
    buffer_size: int = 10
    max_staleness: int = 10
    staleness_weight: str = "poly:0.5"
