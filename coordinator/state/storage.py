"""Disk (or quota) full: recognised wherever it surfaces and turned into one retryable `StorageError`.

A full disk shows up as `OSError` ENOSPC/EDQUOT from a file write, or as SQLite's "database or disk
is full" (sometimes "disk I/O error" while SQLite grows its WAL or shared-memory file). Clients
get UNAVAILABLE "coordinator storage full" (they retry UNAVAILABLE), the log gets one clear line,
and the round engine waits for space (`retry_when_full`) instead of dying: every step it retries
is idempotent (files are replaced atomically, rows are written in one transaction).
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fedort.common.errors import ProtocolError, StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
RETRY_INTERVAL_S = 5.0

_listeners: list[Callable[[StorageError], None]] = []


def add_listener(fn: Callable[[StorageError], None]) -> None:
    """Call `fn(err)` each time an engine step waits for space (monitoring counts these)."""
    _listeners.append(fn)


def remove_listener(fn: Callable[[StorageError], None]) -> None:
    if fn in _listeners:
        _listeners.remove(fn)


def storage_error(exc: BaseException | None) -> StorageError | None:
    """The StorageError `exc` (or an exception it was raised from) amounts to; None if it is not a full disk."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, StorageError):
            return exc
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            err = StorageError(f"coordinator storage full: {exc.strerror or 'no space left'}; retry later")
            err.detail = f"{exc.strerror} ({exc.filename})" if exc.filename else str(exc)
            return err
        text = str(exc).lower()
        # by text only for errors that do not carry client input (a ProtocolError may quote a client string)
        if not isinstance(exc, ProtocolError) and ("no space left on device" in text or "disk quota exceeded" in text):
            err = StorageError("coordinator storage full: no space left on device; retry later")  # e.g. ORT's export
            err.detail = str(exc)
            return err
        if isinstance(exc, sqlite3.OperationalError) and "full" in text:
            err = StorageError(f"coordinator storage full: SQLite: {exc}; retry later")
            err.detail = str(exc)
            return err
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def raise_if_full(exc: BaseException) -> None:
    """Re-raise `exc` as a StorageError when it is a full disk (else return: the caller re-raises it)."""
    err = storage_error(exc)
    if err is not None and err is not exc:
        raise err from exc


async def retry_when_full(
    step: Callable[[], Any | Awaitable[Any]],
    what: str,
    on_full: Callable[[StorageError], None] = lambda e: None,
    interval_s: float = RETRY_INTERVAL_S,
) -> Any:
    """Run `step()` (sync or async) until it does not fail for a full disk; other errors propagate.

    Between attempts it logs one error line per attempt and calls `on_full` (metrics, status).
    """
    while True:
        try:
            result = step()
            return await result if inspect.isawaitable(result) else result
        except Exception as e:  # noqa: BLE001 - filtered just below
            err = storage_error(e)
            if err is None:
                raise
            log.error(
                "%s: coordinator storage full (%s); waiting for space, next attempt in %g s",
                what,
                getattr(err, "detail", err),
                interval_s,
            )
            on_full(err)
            for listener in list(_listeners):
                listener(err)
            await asyncio.sleep(interval_s)


__all__ = [
    "FULL_ERRNOS",
    "StorageError",
    "add_listener",
    "raise_if_full",
    "remove_listener",
    "retry_when_full",
    "storage_error",
]
