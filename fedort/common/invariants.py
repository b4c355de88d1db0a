"""Narrowing a value the caller's state guarantees is set, with an error that says which one was not."""

from __future__ import annotations

from typing import TypeVar

from fedort.common.errors import FedortError

T = TypeVar("T")


def present(value: T | None, what: str) -> T:
    """`value`, which must be set at this point; a None is a bug in the caller (FedortError, INTERNAL)."""
    if value is None:
        raise FedortError(f"internal error: {what} is not set")
    return value
