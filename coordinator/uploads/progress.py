"""Progress, not presence, holds an upload slot: an upload is watched window by window while it receives.

    after upload_grace_s, every upload_rate_window_s:
        bytes received in the window < upload_min_rate_bytes_s × window (or what is left)   -> dropped
        the rest cannot arrive by the deadline (or the round's) at the window's rate          -> dropped
    deadline = upload_grace_s + payload bytes / upload_min_rate_bytes_s   (the round's close cuts it anyway)

A dropped upload answers RESOURCE_EXHAUSTED saying which rule it broke (the device may send it
again, queued behind the uploads already waiting for a slot), so a device that trickles a byte now
and then loses its slot after one window instead of holding it to the whole-upload deadline, and
no upload outlives the round it targets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from fedort.common.errors import ResourceExhaustedError


@dataclass(frozen=True)
class ProgressRule:
    """The minimum progress an upload must make (bytes/s over windows of `window_s`, after `grace_s`)."""

    min_rate: float
    window_s: float
    grace_s: float

    def deadline_s(self, payload_bytes: int) -> float:
        """Seconds the whole upload may take: grace + its bytes at the minimum rate."""
        return self.grace_s + payload_bytes / self.min_rate


async def watch(
    recv: asyncio.Future,
    received: Callable[[], int],
    payload_bytes: int,
    rule: ProgressRule,
    deadline_s: float,
    round_left_s: float | None = None,
) -> None:
    """Return once `recv` is done; cancel it and raise ResourceExhaustedError when the upload falls behind
    (`round_left_s`: seconds to the round's deadline, which the upload must be on course to beat)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    end = start + deadline_s
    finish_by = end if round_left_s is None else min(end, start + round_left_s)
    check = start + rule.grace_s + rule.window_s
    mark = received()
    while True:
        done, _ = await asyncio.wait({recv}, timeout=max(0.0, min(end, check) - loop.time()))
        if done:
            return
        now = loop.time()
        got = received()
        if now >= end:
            recv.cancel()
            raise ResourceExhaustedError(
                f"upload too slow: {got} of {payload_bytes} bytes in {now - start:.0f} s, past its deadline "
                f"(upload_grace_s + payload / upload_min_rate_bytes_s); it was dropped, send it again"
            )
        if now < check:
            continue
        window = now - check + rule.window_s
        step, left = got - mark, payload_bytes - got
        need = min(rule.min_rate * rule.window_s, payload_bytes - mark)
        if step < need:
            recv.cancel()
            raise ResourceExhaustedError(
                f"upload too slow: {step} bytes in the last {window:.1f} s, an upload must keep at least "
                f"{rule.min_rate:g} bytes/s over every {rule.window_s:g} s (upload_min_rate_bytes_s, "
                f"upload_rate_window_s); it was dropped, send it again"
            )
        if left > 0 and left * window / step > finish_by - now:
            recv.cancel()
            raise ResourceExhaustedError(
                f"upload too slow: at {step / window:.0f} bytes/s its last {left} bytes would arrive after its "
                f"deadline (or its round's) in {max(0.0, finish_by - now):.1f} s; it was dropped, send it again"
            )
        mark, check = got, now + rule.window_s


__all__ = ["ProgressRule", "watch"]
