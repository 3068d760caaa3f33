"""A fair share of a shared pool (SPEC 12): `FairGate`, `capacity` places shared by every user.

Policy: when a place comes free and several jobs wait, it goes to the waiting job whose user
holds the fewest places; among users holding as many, the job that asked first (so users
with one job each are served in arrival order, and one user's queue is served in its own
order). A user alone takes every free place at once; a user that holds more than
`ceil(capacity / users)` keeps its running jobs (nothing is pre-empted) but gets no new
place while another user waits, so another user never waits behind more than the jobs
already running. A job waits at most until its own deadline, then gets no place: the
caller answers "busy".

`user` is any hashable key (a user id); None is one shared key (the CLI, a test without a user).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Hashable

from foundation.cancellation import NEVER, CancelToken

CANCEL_POLL_S = 0.1  # how often a waiting job looks at its cancel token
RETRY_AFTER_S = 5  # what a "busy" answer tells the client to wait (HTTP `Retry-After`)


class Busy(Exception):
    """A shared pool had no place for this user's job within its wait: the server is busy
    with others' work, not failing (a tool's BUSY error; 503 `busy` with `Retry-After` over HTTP)."""

    def __init__(self, message: str, retry_after_s: int = RETRY_AFTER_S) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class FairGate:
    """`capacity` places; `acquire(user, until)` takes one fairly, `release(user)` gives it back."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a fair gate needs at least one place")
        self.capacity = capacity
        self._cond = threading.Condition()
        self._held: Counter[Hashable] = Counter()  # places held, per user
        self._waiting: dict[int, Hashable] = {}  # ticket -> user, oldest ticket first
        self._tickets = itertools.count()

    def acquire(self, user: Hashable, until: float, cancel: CancelToken = NEVER) -> bool:
        """A place for `user` before `until` (a `time.monotonic()` value); False when the
        deadline passed or `cancel` fired first."""
        with self._cond:
            ticket = next(self._tickets)
            self._waiting[ticket] = user
            try:
                while not cancel.cancelled:
                    if self._free() > 0 and self._first() == ticket:
                        del self._waiting[ticket]
                        self._held[user] += 1
                        self._cond.notify_all()  # another place may be free for the next in line
                        return True
                    left = until - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(min(left, CANCEL_POLL_S))
                return False
            finally:
                if self._waiting.pop(ticket, None) is not None:
                    self._cond.notify_all()  # the next in line may now be first

    def release(self, user: Hashable) -> None:
        with self._cond:
            self._held[user] -= 1
            if self._held[user] <= 0:
                del self._held[user]
            self._cond.notify_all()

    def waiting(self) -> int:
        """Jobs waiting for a place (for tests and the operator)."""
        with self._cond:
            return len(self._waiting)

    def held(self) -> dict[Hashable, int]:
        """Places held per user (for tests and the operator)."""
        with self._cond:
            return dict(self._held)

    def _free(self) -> int:
        return self.capacity - sum(self._held.values())

    def _first(self) -> int:
        """The ticket served next: its user holds the fewest places, then the oldest ticket."""
        return min(self._waiting, key=lambda ticket: (self._held[self._waiting[ticket]], ticket))
