"""Stopping work that blocks: a cancel token for one turn, and a watchdog for deadlines.

A turn runs on its own thread and spends its time blocked in someone else's code: a
socket read of a provider stream, a Docker attach, a SQLite statement. Setting a flag is
not enough to stop that; the blocked call must be interrupted from outside (a socket
shut down, a container killed). So a `CancelToken` holds callbacks that the blocking code
registers while it blocks ("to stop me, shut this socket"), and `cancel()` runs them at
once, on the cancelling thread. The same callbacks serve deadlines: a `Watchdog` runs
them when a deadline passes, so "from connect to last byte" is enforced by the thing that
reads the bytes, not between reads.

Neither class is a module-level singleton: the app builds them and passes them in.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("cancellation")

Callback = Callable[[], None]


class Cancelled(Exception):
    """The work was stopped on purpose (the user pressed Stop); not a failure to report."""

    def __init__(self, reason: str = "cancelled") -> None:
        super().__init__(reason)
        self.reason = reason


def _run_quietly(callback: Callback) -> None:
    try:
        callback()
    except Exception:  # a failing interrupt must not stop the other interrupts
        log.exception("cancel callback failed")


class CancelToken:
    """Thread-safe, one-way: once cancelled, always cancelled.

    `on_cancel(callback)` registers an interrupt and returns a function that removes it;
    a callback registered after cancellation runs immediately, so there is no window in
    which a freshly opened socket escapes a cancel that raced with it.
    """

    __slots__ = ("_callbacks", "_cancelled", "_event", "_ids", "_lock", "_reason")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callback] = {}
        self._ids = 0
        self._reason: str | None = None
        self._cancelled = False
        self._event: threading.Event | None = None  # made for the first `wait`: most tokens are never waited on

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def reason(self) -> str | None:
        return self._reason

    def cancel(self, reason: str = "cancelled") -> bool:
        """Cancel and run every registered interrupt; False when it was already cancelled."""
        with self._lock:
            if self._cancelled:
                return False
            self._reason = reason
            self._cancelled = True
            if self._event is not None:
                self._event.set()
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        for callback in callbacks:
            _run_quietly(callback)
        return True

    def on_cancel(self, callback: Callback) -> Callback:
        """Run `callback` on cancellation (now, if already cancelled); returns the remover."""
        with self._lock:
            if not self._cancelled:
                key = self._ids
                self._ids += 1
                self._callbacks[key] = callback
                return lambda: self._remove(key)
        _run_quietly(callback)
        return lambda: None

    def _remove(self, key: int) -> None:
        with self._lock:
            self._callbacks.pop(key, None)

    def raise_if_cancelled(self) -> None:
        if self._cancelled:
            raise Cancelled(self._reason or "cancelled")

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled or `timeout` passes; True when cancelled."""
        with self._lock:
            if self._cancelled:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)


NEVER = CancelToken()  # a token nobody cancels, for callers that cannot be stopped


class Watchdog:
    """Runs callbacks at their deadlines on one daemon thread (started on first use).

    One thread serves every deadline of the process owner (a provider chain, say), so a
    deadline costs a heap entry, not a thread per call. The thread ends once nothing is
    scheduled for `idle_s` seconds (the next `schedule` starts a new one), so owners that
    come and go (an app per test) do not leave a sleeping thread each behind them.
    """

    def __init__(self, name: str = "watchdog", idle_s: float = 5.0) -> None:
        self._name = name
        self._idle_s = idle_s
        self._condition = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._pending: dict[int, Callback] = {}  # callbacks live here, so unscheduling frees them at once
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def schedule(self, delay_s: float, callback: Callback) -> Callback:
        """Run `callback` after `delay_s` seconds unless the returned function is called first.

        The thread is woken only when this deadline is the new earliest one (or the thread is
        new): a wake is a thread switch, and on a busy 2-core machine that costs more than
        the rest of a provider call's bookkeeping.
        """
        key = next(self._ids)
        entry = (time.monotonic() + max(0.0, delay_s), key)
        with self._condition:
            heapq.heappush(self._heap, entry)
            self._pending[key] = callback
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            elif self._heap[0] is entry:
                self._condition.notify()

        def unschedule() -> None:
            with self._condition:
                self._pending.pop(key, None)  # its heap entry is skipped when its time comes

        return unschedule

    def _loop(self) -> None:
        while True:
            with self._condition:
                while self._heap and self._heap[0][1] not in self._pending:
                    heapq.heappop(self._heap)  # unscheduled before its time
                if not self._pending:
                    self._heap.clear()
                    self._condition.wait(self._idle_s)
                    if not self._pending:
                        self._thread = None  # idle: end; schedule() starts a new thread
                        return
                    continue
                at, key = self._heap[0]
                wait = at - time.monotonic()
                if wait > 0:
                    self._condition.wait(min(wait, self._idle_s))  # re-check for idleness now and then
                    continue
                heapq.heappop(self._heap)
                callback = self._pending.pop(key, None)
            if callback is not None:
                _run_quietly(callback)
