"""Mask work ahead of the share delivery: `SecAggClient.precompute_masks` in a thread while the flow waits.

The pairwise masks need only the roster (U1 with every neighbour's public keys), so a device can
expand them during the SHARE_KEYS wait instead of after the delivery names U2. `MaskAhead` is that
thread's lifetime as a `with` block around the wait: leaving it normally waits for the masks
(`masked_input` comes next and uses them); leaving it with an exception (the round went stale, the
coordinator aborted, the device is stopping) asks the thread to stop after the mask it is expanding
and joins it, so no thread outlives the flow. A precomputation that failed or stopped keeps nothing,
and `masked_input` then computes every mask on demand, as it would without it.

Only worth it where the device's CPU idles while it waits (`worth_it`): a simulation worker hosting
many devices on one transport runs their protocol steps at the same time under one interpreter lock,
and there the masks of the first devices to seal delay the shares of the last ones, which the phase
waits for (benchmarks/bench_secagg_round.py shows it; the same with the thread at a low priority, so it
is the interpreter lock, not the cores).
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import Any

from fedort.edge_client.secagg.client import SecAggClient

log = logging.getLogger(__name__)


def worth_it(transport: Any) -> bool:
    """Whether this device's protocol flow is the only one on `transport` (a test's wrapper counts as alone)."""
    steps = getattr(transport, "secagg_steps", None)
    return steps is None or steps.flows <= 1


class MaskAhead:
    """Runs `client.precompute_masks` in its own thread for the duration of a `with` block."""

    def __init__(self, client: SecAggClient) -> None:
        self._client = client
        self._cancel = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"secagg-masks-{client.client_id}", daemon=True)
        self.finished = False  # the masks are ready for masked_input

    def _run(self) -> None:
        try:
            self.finished = self._client.precompute_masks(self._cancel.is_set)
        except Exception as exc:  # noqa: BLE001 - masked_input computes them again and reports what is wrong
            log.warning(
                "secagg client %s: masks not precomputed (%s); computing them on delivery", self._client.client_id, exc
            )

    def __enter__(self) -> MaskAhead:
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self._cancel.set()
        self.thread.join()
