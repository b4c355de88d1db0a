"""Retrying calls to the coordinator: exponential backoff with full jitter and a cap.

Only failures that waiting can fix are retried: the coordinator is unreachable or restarting
(UNAVAILABLE, connection loss), a call ran out of time (DEADLINE_EXCEEDED) or was aborted
(ABORTED), or a rate limit said when to come back (RESOURCE_EXHAUSTED with `retry-after`, or
"retry in S s" in its message: the next attempt waits at least that long). A TLS certificate
that fails verification (`CertificateError`) is not retried. Everything else — UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT, a wrong
model, a size limit — is raised at once, because the next attempt would fail the same way.

The delay before attempt n+1 is uniform in [0, min(max_delay, initial * multiplier**n)] ("full
jitter"), so a fleet of devices that lost the coordinator at the same moment does not come
back in lock-step. `give_up_after_s` bounds the whole retry loop; a `threading.Event` lets a
caller (a signal handler, an app shutting down) cut a backoff sleep short.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import grpc

from fedort.common import clock as fedort_clock
from fedort.common.errors import CertificateError, FedortError, UnavailableError

log = logging.getLogger("fedort.edge.retry")

T = TypeVar("T")

#: Status codes a later attempt can succeed on.
RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
    }
)
RETRYABLE_CODE_NAMES = frozenset(c.name for c in RETRYABLE_CODES)


class StoppedError(FedortError):
    """The client was asked to stop (signal or `EdgeClient.stop()`) while waiting to retry."""

    code = "CANCELLED"


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter.

    `initial_s` is the cap of the first delay, multiplied by `multiplier` per attempt up to
    `max_delay_s`. The loop gives up when the next attempt would start more than
    `give_up_after_s` after the first one (None: never give up) or after `max_attempts`.
    """

    initial_s: float = 0.2
    multiplier: float = 2.0
    max_delay_s: float = 10.0
    give_up_after_s: float | None = 300.0
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        if not (self.initial_s > 0 and self.multiplier >= 1 and self.max_delay_s >= self.initial_s):
            raise ValueError(
                f"backoff needs initial_s > 0, multiplier >= 1 and max_delay_s >= initial_s; got "
                f"initial_s={self.initial_s}, multiplier={self.multiplier}, max_delay_s={self.max_delay_s}"
            )

    def ceiling(self, attempt: int) -> float:
        """The largest delay after failed attempt number `attempt` (0-based)."""
        # cap the exponent so a long outage does not overflow the float
        return min(self.max_delay_s, self.initial_s * self.multiplier ** min(attempt, 64))

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """Endless jittered delays: uniform(0, ceiling(n)) for n = 0, 1, 2, ..."""
        rng = rng or random.Random()
        attempt = 0
        while True:
            yield rng.uniform(0.0, self.ceiling(attempt))
            attempt += 1


def is_retryable(exc: BaseException) -> bool:
    """True for failures a later attempt may not meet (the coordinator down, a call timed out, a rate limit)."""
    if isinstance(exc, CertificateError):
        return False
    if retry_after(exc) is not None and getattr(exc, "code", None) == "RESOURCE_EXHAUSTED":
        return True
    if isinstance(exc, grpc.RpcError):
        return exc.code() in RETRYABLE_CODES if hasattr(exc, "code") else True
    if isinstance(exc, FedortError):
        return getattr(exc, "code", None) in RETRYABLE_CODE_NAMES
    return isinstance(exc, (ConnectionError, TimeoutError))


def call_with_retry(
    fn: Callable[[], T],
    backoff: Backoff,
    *,
    what: str,
    stop: threading.Event | None = None,
    rng: random.Random | None = None,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
    clock: Callable[[], float] = fedort_clock.monotonic,
) -> T:
    """Call `fn()` until it succeeds, retrying only retryable failures.

    Non-retryable errors propagate unchanged. When the budget is spent the last error is
    raised as UnavailableError naming `what`, the attempts and the time spent. If `stop` is
    set during a backoff sleep, StoppedError is raised.
    """
    started = clock()
    delays = backoff.delays(rng)
    attempt = 0
    while True:
        if stop is not None and stop.is_set():
            raise StoppedError(f"stopped before {what}")
        try:
            return fn()
        except BaseException as exc:  # noqa: BLE001 - filtered just below
            if not is_retryable(exc):
                raise
            attempt += 1
            delay = next(delays)
            asked = retry_after(exc)
            if asked is not None:  # the server said when: wait that long, plus a little jitter
                delay = max(delay, asked * (1.0 + 0.1 * (rng or random).random()))
            elapsed = clock() - started
            out_of_attempts = backoff.max_attempts is not None and attempt >= backoff.max_attempts
            out_of_time = backoff.give_up_after_s is not None and elapsed + delay > backoff.give_up_after_s
            if out_of_attempts or out_of_time:
                raise UnavailableError(
                    f"{what} failed {attempt} time(s) over {elapsed:.1f} s, giving up: {exc}"
                ) from exc
            log.info("%s failed (%s); retry %d in %.2f s", what, _short(exc), attempt, delay)
            if on_retry is not None:
                on_retry(attempt, exc, delay)
            if stop is not None:
                if fedort_clock.wait(stop, delay):
                    raise StoppedError(f"stopped while waiting to retry {what}") from exc
            else:
                fedort_clock.sleep(delay)


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait before the next attempt (None: it did not say)."""
    value = getattr(exc, "retry_after_s", None)
    return float(value) if isinstance(value, (int, float)) else None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


__all__ = ["Backoff", "RETRYABLE_CODES", "StoppedError", "call_with_retry", "is_retryable", "retry_after"]
