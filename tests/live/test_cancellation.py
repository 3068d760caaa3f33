"""`foundation/cancellation.py`: the cancel token's interrupts and the deadline watchdog."""

from __future__ import annotations

import threading

import pytest

from foundation.cancellation import Cancelled, CancelToken, Watchdog
from testing.waiting import HUNG_S, wait_until


def test_cancel_runs_every_interrupt_once_and_late_ones_at_once():
    token = CancelToken()
    calls: list[str] = []
    token.on_cancel(lambda: calls.append("a"))
    remove = token.on_cancel(lambda: calls.append("removed"))
    remove()
    assert token.cancel("why") is True and token.cancel() is False
    token.on_cancel(lambda: calls.append("late"))
    assert calls == ["a", "late"] and token.reason == "why"
    with pytest.raises(Cancelled):
        token.raise_if_cancelled()


def test_a_failing_interrupt_does_not_stop_the_others():
    token = CancelToken()
    calls: list[str] = []
    token.on_cancel(lambda: 1 / 0)
    token.on_cancel(lambda: calls.append("b"))
    token.cancel()
    assert calls == ["b"]


def test_watchdog_fires_due_deadlines_in_order_and_never_unscheduled_ones():
    watchdog = Watchdog("t", idle_s=0.2)
    fired: list[str] = []
    done = threading.Event()
    # "late" is scheduled first; only a stall of 0.95 s between these two lines could make it due first
    watchdog.schedule(1.0, lambda: fired.append("late"))
    watchdog.schedule(0.05, lambda: fired.append("early"))
    cancel = watchdog.schedule(0.07, lambda: fired.append("unscheduled"))
    watchdog.schedule(1.1, done.set)
    cancel()
    assert done.wait(HUNG_S)
    assert fired == ["early", "late"]


def test_watchdog_thread_ends_when_idle_and_comes_back():
    watchdog = Watchdog("t-idle", idle_s=0.05)
    watchdog.schedule(60, lambda: None)()  # scheduled and unscheduled at once
    wait_until(lambda: watchdog._thread is None, "the idle watchdog thread never ended")
    fired = threading.Event()
    watchdog.schedule(0.01, fired.set)
    assert fired.wait(HUNG_S)
