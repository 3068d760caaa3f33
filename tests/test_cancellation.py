"""`cancellation.py`: the cancel token's interrupts and the deadline watchdog."""

from __future__ import annotations

import threading
import time

import pytest

from cancellation import Cancelled, CancelToken, Watchdog


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
    watchdog.schedule(0.10, lambda: fired.append("late"))
    watchdog.schedule(0.05, lambda: fired.append("early"))
    cancel = watchdog.schedule(0.07, lambda: fired.append("unscheduled"))
    watchdog.schedule(0.15, done.set)
    cancel()
    assert done.wait(5)
    assert fired == ["early", "late"]


def test_watchdog_thread_ends_when_idle_and_comes_back():
    watchdog = Watchdog("t-idle", idle_s=0.05)
    watchdog.schedule(60, lambda: None)()  # scheduled and unscheduled at once
    deadline = time.monotonic() + 5
    while watchdog._thread is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert watchdog._thread is None
    fired = threading.Event()
    watchdog.schedule(0.01, fired.set)
    assert fired.wait(5)
