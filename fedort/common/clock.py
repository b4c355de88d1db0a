"""The time fedort's deadlines, liveness timeouts and retries read: the system clock, or one a test drives.

Product code asks this module (`now()`, `now_ms()`, `monotonic()`, `sleep()`, `wait()`) instead of
`time` where a decision depends on elapsed time: round and phase deadlines, the client registry's
liveness timeout, the device's retry budget and backoff. By default these are the system clock's
(`SystemClock`). A test installs a `ManualClock` (`with use(ManualClock()) as clock:`) in the process
under test and moves time with `clock.advance(s)`: a sleep returns at once and advances the clock, and
nothing depends on how fast the machine is. Timeouts that only bound how long a call blocks (a
long-poll's hold, a gRPC deadline) stay on real time: they change no outcome.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator


class SystemClock:
    """The system's clocks: `time.time` for timestamps, `time.monotonic` for intervals."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """`event.wait(seconds)`: True if the event was set."""
        return event.wait(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when told: `advance(s)`, or a `sleep(s)` (which returns at once).

    Both readings start where the system clock is (timestamps stay plausible) and move together.
    Thread-safe; `wait(event, s)` returns at once with the event's state, after advancing `s` if unset.
    """

    def __init__(self, start: float | None = None) -> None:
        self._lock = threading.Lock()
        self._offset = 0.0
        self._wall0 = time.time() if start is None else start
        self._mono0 = time.monotonic()

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock moves forward only, got {seconds} s")
        with self._lock:
            self._offset += seconds

    def now(self) -> float:
        with self._lock:
            return self._wall0 + self._offset

    def monotonic(self) -> float:
        with self._lock:
            return self._mono0 + self._offset

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if event.is_set():
            return True
        self.advance(max(0.0, seconds))
        return event.is_set()


Clock = SystemClock | ManualClock
_clock: Clock = SystemClock()


def current() -> Clock:
    return _clock


@contextlib.contextmanager
def use(clock: Clock) -> Iterator[Clock]:
    """Make `clock` the process's clock inside the block (for tests), then restore the previous one."""
    global _clock
    previous, _clock = _clock, clock
    try:
        yield clock
    finally:
        _clock = previous


def now() -> float:
    """Seconds since the epoch (timestamps, the registry's last-seen times)."""
    return _clock.now()


def now_ms() -> int:
    """Milliseconds since the epoch (what the state store records, round deadlines)."""
    return int(_clock.now() * 1000)


def monotonic() -> float:
    """Seconds on a clock that never goes back (intervals, retry budgets)."""
    return _clock.monotonic()


def sleep(seconds: float) -> None:
    _clock.sleep(seconds)


def wait(event: threading.Event, seconds: float) -> bool:
    """Wait up to `seconds` for `event`; True if it was set."""
    return _clock.wait(event, seconds)


__all__ = ["Clock", "ManualClock", "SystemClock", "current", "monotonic", "now", "now_ms", "sleep", "use", "wait"]
