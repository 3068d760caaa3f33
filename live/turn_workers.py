"""The turn workers, shared fairly: no user holds more than a share of `TURN_WORKERS` (SPEC 12).

A turn runs on one of `workers` threads of a `ThreadPoolExecutor`. `FairWorkers` decides when a
turn is handed to it: at once while its user holds fewer than `share` running turns and a thread
is free; otherwise the turn waits in its user's queue (holding no thread). When a turn ends, the
next one to start is the waiting turn of the user who holds the fewest running turns (the
oldest among equals), so one user's many turns never keep another user's one turn waiting
behind them, and a user alone still gets `share` turns at once.

A waiting turn that is cancelled (Stop, its time limit) starts at once, past the share: it
ends as soon as it starts, and a user's Stop never waits for their other turns.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter, deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from foundation.cancellation import CancelToken

Job = Callable[[], None]
SPARE_THREADS = 2


@dataclass
class _Waiting:
    ticket: int
    user: Hashable
    job: Job
    token: CancelToken
    forget: Callable[[], None] = field(default=lambda: None)


class FairWorkers:
    """`workers` threads; each user runs at most `share` turns at once (the rest wait, threadless)."""

    def __init__(self, workers: int, share: int) -> None:
        if workers < 1 or share < 1:
            raise ValueError("turn workers need at least one thread and a share of at least one")
        self.workers = workers
        self.share = min(share, workers)
        # two threads more than the share allows: a cancelled waiting turn starts at once, and ends so
        self._executor = ThreadPoolExecutor(max_workers=workers + SPARE_THREADS, thread_name_prefix="turn")
        self._lock = threading.Lock()
        self._running: Counter[Hashable] = Counter()
        self._queues: dict[Hashable, deque[_Waiting]] = {}
        self._tickets = itertools.count()

    def submit(self, user: Hashable, job: Job, token: CancelToken) -> bool:
        """Run `job` for `user` now or when its turn comes; True when it started at once."""
        with self._lock:
            if self._may_start(user):
                self._start(user, job)
                return True
            waiting = _Waiting(next(self._tickets), user, job, token)
            self._queues.setdefault(user, deque()).append(waiting)
        waiting.forget = token.on_cancel(lambda: self._start_cancelled(waiting))
        return False

    def running(self, user: Hashable | None = None) -> int:
        with self._lock:
            return self._running[user] if user is not None else sum(self._running.values())

    def waiting(self) -> int:
        with self._lock:
            return sum(len(queue) for queue in self._queues.values())

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _may_start(self, user: Hashable) -> bool:
        return sum(self._running.values()) < self.workers and self._running[user] < self.share

    def _start(self, user: Hashable, job: Job) -> None:
        """Hand `job` to a thread (the lock is held)."""
        self._running[user] += 1
        self._executor.submit(self._run, user, job)

    def _run(self, user: Hashable, job: Job) -> None:
        try:
            job()
        finally:
            started: list[_Waiting] = []
            with self._lock:
                self._running[user] -= 1
                if self._running[user] <= 0:
                    del self._running[user]
                while (chosen := self._next()) is not None:
                    self._start(chosen.user, chosen.job)
                    started.append(chosen)
            for waiting in started:
                waiting.forget()

    def _next(self) -> _Waiting | None:
        """The waiting turn to start now (the lock is held): its user holds the fewest, then the oldest."""
        if sum(self._running.values()) >= self.workers:
            return None
        candidates = [queue[0] for user, queue in self._queues.items() if queue and self._running[user] < self.share]
        if not candidates:
            return None
        chosen = min(candidates, key=lambda waiting: (self._running[waiting.user], waiting.ticket))
        self._dequeue(chosen)
        return chosen

    def _dequeue(self, waiting: _Waiting) -> bool:
        queue = self._queues.get(waiting.user)
        if queue is None or waiting not in queue:
            return False
        queue.remove(waiting)
        if not queue:
            del self._queues[waiting.user]
        return True

    def _start_cancelled(self, waiting: _Waiting) -> None:
        with self._lock:
            if not self._dequeue(waiting):
                return  # it started already
            self._start(waiting.user, waiting.job)
