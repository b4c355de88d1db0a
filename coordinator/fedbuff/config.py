"""The FedBuff section (`[coordinator.fedbuff]`, also a simulation's): asynchronous mode's settings."""

from __future__ import annotations

from dataclasses import dataclass

from fedort.common.settings.options import is_int, need, option


@dataclass(frozen=True)
class FedBuffSettings:
    """`mode = "async"` runs FedBuff (coordinator.fedbuff.engine) instead of rounds; `rounds` then counts versions."""

    mode: str = option(
        "sync",
        "sync: rounds; async: FedBuff global versions, `rounds` of them",
        choices=("sync", "async"),
    )
    buffer_size: int = option(10, "async: updates folded into each new global version (K)", metavar="K")
    max_staleness: int = option(10, "async: updates trained on a version more than S behind are refused", metavar="S")
    staleness_weight: str = option(
        "poly:0.5",
        "async: weight of an update s versions stale: constant | poly:A | hinge:A,B",
        metavar="SPEC",
    )

    def __post_init__(self) -> None:
        from fedort.coordinator.fedbuff.staleness import parse_staleness_weight

        need(self.mode in ("sync", "async"), "mode must be 'sync' or 'async'", self.mode)
        need(is_int(self.buffer_size, 1), "buffer_size must be an integer >= 1", self.buffer_size)
        need(is_int(self.max_staleness, 0), "max_staleness must be an integer >= 0", self.max_staleness)
        parse_staleness_weight(self.staleness_weight)

    @property
    def is_async(self) -> bool:
        return self.mode == "async"
