"""Per-client limits: concurrent streams and submission rate; beyond them RESOURCE_EXHAUSTED.

Both are checked before any work is done for the call, so a refused call costs the server a
dictionary lookup and leaves every other client (and the health service) unaffected.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from fedort.common.errors import ResourceExhaustedError

#: Rate buckets of clients idle longer than this are forgotten (bounds memory under many ids).
_IDLE_S = 600.0


class StreamLimiter:
    """At most `limit` streams (downloads, uploads) in progress per client; 0 disables."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    @contextlib.contextmanager
    def stream(self, client_id: str, what: str) -> Iterator[None]:
        n = self._open.get(client_id, 0)
        if self.limit and n >= self.limit:
            raise ResourceExhaustedError(
                f"client {client_id} already has {n} streams open (limit "
                f"{self.limit} per client); finish one before starting a {what}"
            )
        self._open[client_id] = n + 1
        try:
            yield
        finally:
            left = self._open[client_id] - 1
            if left:
                self._open[client_id] = left
            else:
                del self._open[client_id]


class RateLimiter:
    """Token bucket per client: `per_minute` submissions per minute, bursts up to `per_minute`; 0 disables."""

    def __init__(self, per_minute: float, clock=time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, at)

    def take(self, client_id: str, what: str = "submission") -> None:
        if not self.per_minute:
            return
        now = self._clock()
        if len(self._buckets) > 10_000:
            self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < _IDLE_S}
        tokens, at = self._buckets.get(client_id, (self.per_minute, now))
        tokens = min(self.per_minute, tokens + (now - at) * self.per_minute / 60.0)
        if tokens < 1.0:
            wait = (1.0 - tokens) * 60.0 / self.per_minute
            self._buckets[client_id] = (tokens, now)
            err = ResourceExhaustedError(
                f"client {client_id} exceeded {self.per_minute:g} {what}s per minute; retry in {wait:.1f} s"
            )
            err.retry_after_s = wait  # sent as `retry-after` trailing metadata by the servicer
            raise err
        self._buckets[client_id] = (tokens - 1.0, now)


__all__ = ["RateLimiter", "StreamLimiter"]
