"""One device's masking at a time on a shared transport: the masked-input phase as a pipeline, not a burst.

A simulation worker hosts many devices on one transport (one `StepBatcher`), and the share delivery
reaches all of them at once. Each device's flow runs in its own thread, and the mask ciphers, the X25519
agreements and numpy's adds release the interpreter lock, so 50 flows masking together keep every core
busy with dozens of runnable threads: the coordinator, whose few threads must take, commit and fold each
masked upload one after another, gets a small share of the CPU, and its chain starts only when most
devices have finished. `lane(transport)` is a lock per shared transport around the CPU work of the
masked input (encode, masks, pack): one device of the worker masks at a time, its upload goes out while
the next one masks, and the coordinator's chain runs beside the workers' masking. A device alone on its
transport (`secagg_ahead.worth_it`) has no lane to wait for.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from contextlib import AbstractContextManager
from typing import Any

_LANES: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_LANES_LOCK = threading.Lock()


def lane(transport: Any) -> AbstractContextManager[object]:
    """The masking lane of `transport` (a lock shared by its devices), or no lock for a device alone on it."""
    steps = getattr(transport, "secagg_steps", None)  # the transport's StepBatcher (a test's wrapper has none)
    if steps is None or steps.flows <= 1:
        return contextlib.nullcontext()
    with _LANES_LOCK:
        lock = _LANES.get(steps)
        if lock is None:
            lock = _LANES[steps] = threading.Lock()
    return lock
