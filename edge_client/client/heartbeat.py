"""A background thread that tells the coordinator "still here" while the device is busy.

Long-polls and uploads already count as signs of life; during local training nothing else goes
over the wire, so a training round longer than the coordinator's client timeout would make the
device look gone. `Heartbeat` is a context manager: it starts a daemon thread on entry, sends a
Heartbeat every `interval_s` (failures are logged, never raised — the next real call will
retry properly), and stops and joins the thread on exit.
"""

from __future__ import annotations

import logging
import threading

from fedort.common.errors import FedortError
from fedort.edge_client.transport.grpc_transport import Transport

log = logging.getLogger("fedort.edge.heartbeat")


class Heartbeat:
    """Heartbeats for `client_id` every `interval_s` while the `with` block runs."""

    def __init__(self, transport: Transport, client_id: str, interval_s: float) -> None:
        self._transport = transport
        self._client_id = client_id
        self.interval_s = max(0.05, float(interval_s))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.failed = 0

    def __enter__(self) -> Heartbeat:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{self._client_id}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5.0)
            self._thread = None

    def _loop(self) -> None:
        timeout = min(5.0, max(1.0, self.interval_s))  # short, but not so short that load makes it fail
        while not self._stop.wait(self.interval_s):
            try:
                self._transport.heartbeat(self._client_id, timeout_s=timeout)
                self.sent += 1
            except FedortError as e:
                self.failed += 1
                log.debug("heartbeat for %s failed: %s", self._client_id, e)


__all__ = ["Heartbeat"]
