"""FedAvg: the example-weighted mean of the updates, folded in as they arrive (the default).

The arithmetic lives in `coordinator.fedavg.WeightedSum`, which the round engine keeps; this
strategy only tells the engine to use it unchanged.
"""

from __future__ import annotations

from fedort.coordinator.strategies.base import Strategy


class FedAvg(Strategy):
    """Σ nᵢ·vᵢ / Σ nᵢ, streaming: memory O(P) whatever the number of clients."""

    name = "fedavg"
    needs_all_updates = False
