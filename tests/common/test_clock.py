"""fedort.common.clock: the system clock by default; a ManualClock moves only when told, and `use` restores."""

from __future__ import annotations

import threading
import time

import pytest

from fedort.common import clock
from fedort.common.clock import ManualClock, SystemClock, use


def test_the_default_clock_is_the_system_s():
    assert isinstance(clock.current(), SystemClock)
    before = time.time()
    assert before - 1 <= clock.now() <= time.time() + 1 and abs(clock.now_ms() - 1000 * time.time()) < 1000


def test_a_manual_clock_moves_only_when_advanced_or_slept():
    manual = ManualClock(start=1_000.0)
    with use(manual):
        mono = clock.monotonic()
        assert clock.now() == 1_000.0 and clock.now_ms() == 1_000_000
        clock.sleep(2.5)                      # returns at once
        manual.advance(0.5)
        assert clock.now() == 1_003.0 and clock.monotonic() == mono + 3.0
    assert isinstance(clock.current(), SystemClock)


def test_a_manual_wait_returns_at_once_with_the_event_s_state():
    manual, event = ManualClock(start=0.0), threading.Event()
    assert manual.wait(event, 10.0) is False and manual.now() == 10.0
    event.set()
    assert manual.wait(event, 10.0) is True and manual.now() == 10.0   # set: no time passes


def test_a_manual_clock_never_goes_back():
    with pytest.raises(ValueError, match="forward only"):
        ManualClock().advance(-1.0)
