"""Named fault-injection points: where a crash test makes the process die, instead of guessing with a sleep.

Off unless the environment names points when the process starts (read once, at import):

    FEDORT_FAULT=NAME[@N][:ACTION][,NAME[@N][:ACTION]...]
    FEDORT_FAULT_LOG=FILE        optional: each point that fires appends "NAME@N ACTION\\n" to FILE (fsynced)

`fault_point(NAME)` in the product code then fires the N-th time the process reaches NAME (default the
first): ACTION `kill` (default) ends the process at once with SIGKILL, as a power cut or the OOM killer
would, after the log line is durable; `raise` raises `FaultInjected` (a plain exception, for the error
paths). A point costs one dictionary lookup when nothing is armed. Points are named `area.moment`
(`POINTS` lists them), so a test can assert which window it hit.

In the test's own process, `with armed(NAME, action):` calls `action()` at each pass of NAME instead
(to hold a thread at a point while the test acts, for example).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

ENV, LOG_ENV = "FEDORT_FAULT", "FEDORT_FAULT_LOG"
ACTIONS = ("kill", "raise")

#: every point the product code reaches, with the window it marks
POINTS = {
    "round.before_commit": "every update of the round acknowledged; the aggregate not yet written",
    "export.before_write": "the round committed durably; its export not yet begun",
    "export.before_mark": "the round's model files written; the export not yet recorded in the state",
    "export.after_mark": "the round's export recorded; the next step not yet taken",
    "upload.before_send": "a device's update encoded (and journaled); nothing of it sent",
    "upload.after_reply": "a device's upload answered (acknowledged, or refused as stale); the answer not yet recorded",
    "transport.before_call": "a device's call past its caller's stop check; the call not yet started (nor cancellable)",
}


class FaultInjected(RuntimeError):
    """Raised by a point armed with the `raise` action."""


def _parse(spec: str) -> dict[str, tuple[int, str]]:
    armed: dict[str, tuple[int, str]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        where, _, action = item.partition(":")
        name, _, nth = where.partition("@")
        action = action or "kill"
        if name not in POINTS:
            raise ValueError(f"{ENV}: unknown fault point {name!r}; known points: {sorted(POINTS)}")
        if action not in ACTIONS:
            raise ValueError(f"{ENV}: unknown action {action!r} for {name!r}; expected one of {list(ACTIONS)}")
        if nth and not (nth.isdigit() and int(nth) >= 1):
            raise ValueError(f"{ENV}: {item!r}: the count after @ must be a whole number ≥ 1")
        armed[name] = (int(nth or 1), action)
    return armed


_ARMED = _parse(os.environ.get(ENV, ""))
_HITS: dict[str, int] = {}
_LOCK = threading.Lock()
_ACTIONS: dict[str, Callable[[], None]] = {}


@contextlib.contextmanager
def armed(name: str, action: Callable[[], None]) -> Iterator[None]:
    """Inside the block, every pass of point `name` in this process calls `action()` (tests)."""
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r}; known points: {sorted(POINTS)}")
    _ACTIONS[name] = action
    try:
        yield
    finally:
        _ACTIONS.pop(name, None)


def fault_point(name: str) -> None:
    """Fire the fault armed at `name`, if any (see the module docstring); otherwise nothing."""
    if _ACTIONS:
        call = _ACTIONS.get(name)
        if call is not None:
            call()
    if not _ARMED or name not in _ARMED:
        return
    nth, action = _ARMED[name]
    with _LOCK:
        _HITS[name] = hit = _HITS.get(name, 0) + 1
    if hit != nth:
        return
    _record(f"{name}@{nth} {action}\n")
    if action == "raise":
        raise FaultInjected(f"fault point {name}@{nth} fired ({POINTS[name]})")
    if hasattr(signal, "SIGKILL"):
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(137)  # pragma: no cover - no SIGKILL (Windows)


def _record(line: str) -> None:
    sys.stderr.write(f"fedort: fault point {line}")
    sys.stderr.flush()
    path = os.environ.get(LOG_ENV)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = ["ACTIONS", "ENV", "LOG_ENV", "POINTS", "FaultInjected", "armed", "fault_point"]
