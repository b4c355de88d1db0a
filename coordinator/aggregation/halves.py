"""Elementwise numpy work on a large vector split over two threads.

numpy's ufuncs release the GIL, so the two halves of a 5 M-value divide run on two cores: the commit's
FedAvg mean (float64 sum / Σ w, rounded to float32) takes less wall time when a second core is free; it is on
the round's critical path, where the devices wait for the next task. Each element is computed exactly as
in one pass, so the bits are the same.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

MIN_SPLIT = 1 << 20  # values below which a second thread costs more than it saves
_ALIGN = 16  # halves start on a multiple of 16 values (whole SIMD vectors and cache lines)


def in_halves(fn: Callable[[int, int], object], n: int) -> None:
    """fn(lo, hi) over [0, n): for n >= MIN_SPLIT as fn(mid, n) in a thread of its own beside fn(0, mid) in
    this one, else once; re-raises what either raised. A fresh thread each call: `fn` may itself split."""
    if n < MIN_SPLIT:
        fn(0, n)
        return
    mid = n // 2 // _ALIGN * _ALIGN
    failed: list[BaseException] = []

    def upper() -> None:
        try:
            fn(mid, n)
        except BaseException as e:  # re-raised in the caller's thread
            failed.append(e)

    helper = threading.Thread(target=upper, name="fedort-half", daemon=True)
    helper.start()
    try:
        fn(0, mid)
    finally:
        helper.join()
    if failed:
        raise failed[0]


__all__ = ["MIN_SPLIT", "in_halves"]
