"""Per-user budgets: how many actions in a moving window (`RateLimiter`), and how many
event streams open at once (`StreamSlots`).

Both answer a `Verdict` and never block. The counting itself is the `limits` library's
moving window (each hit is a timestamp; a key holds at most its budget of them and is
dropped when they expire), over a storage named by URI: `memory://` in-process today, and
`redis://…` when several processes must share the budgets (SPEC 13) without changing any
caller. Open streams are a live count, not a rate: they are held in-process, where the
streams themselves live (the event loop of this process).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

from config.settings import Rate, RateLimits

STREAM_RETRY_AFTER_S = 5  # streams end with their turn or their client; there is no window to wait out


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    limit: str  # the budget's name: turns, runs, generate, login, sessions, streams
    rule: str  # the budget as configured, e.g. "30/minute", for the refusal's message
    retry_after_s: int = 0  # when refused: seconds until one more is allowed (at least 1)


ALLOWED = Verdict(True, "", "")


class RateLimiter:
    """The budgets of `RATE_LIMITS`, counted per identity (a user id, or a user id and an
    address). A budget set to `off` always allows."""

    def __init__(self, rules: RateLimits, storage_uri: str = "memory://") -> None:
        self._rules: dict[str, Rate] = {
            name: rate for name in RateLimits.model_fields if (rate := getattr(rules, name)) is not None
        }
        self._items: dict[str, RateLimitItem] = {
            name: RateLimitItemPerSecond(rate.count, rate.window_s, namespace="orchestrator")
            for name, rate in self._rules.items()
        }
        self._window = MovingWindowRateLimiter(storage_from_string(storage_uri))

    def hit(self, limit: str, *identity: str) -> Verdict:
        """Count one action; refused (and not counted) when the window is full."""
        item = self._items.get(limit)
        if item is None:
            return ALLOWED
        if self._window.hit(item, limit, *identity):
            return ALLOWED
        return self._refusal(limit, item, identity)

    def _refusal(self, limit: str, item: RateLimitItem, identity: tuple[str, ...]) -> Verdict:
        reset = self._window.get_window_stats(item, limit, *identity).reset_time
        return Verdict(False, limit, str(self._rules[limit]), max(1, math.ceil(reset - time.time())))


class StreamSlots:
    """How many event streams each user holds open, at most `per_user` at once.

    Taken when a stream starts and given back when it ends (its turn ended or its client
    left), from the event loop or, under a plain WSGI server, from request threads: so a
    lock guards the counts. A user at zero is forgotten."""

    def __init__(self, per_user: int) -> None:
        self.per_user = per_user
        self._open: dict[int, int] = {}
        self._lock = threading.Lock()

    def take(self, user_id: int) -> Verdict:
        with self._lock:
            held = self._open.get(user_id, 0)
            if held >= self.per_user:
                return self._refusal()
            self._open[user_id] = held + 1
            return ALLOWED

    def room(self, user_id: int) -> Verdict:
        with self._lock:
            return ALLOWED if self._open.get(user_id, 0) < self.per_user else self._refusal()

    def give_back(self, user_id: int) -> None:
        with self._lock:
            held = self._open.get(user_id, 0) - 1
            if held > 0:
                self._open[user_id] = held
            else:
                self._open.pop(user_id, None)

    def held(self, user_id: int) -> int:
        with self._lock:
            return self._open.get(user_id, 0)

    def _refusal(self) -> Verdict:
        return Verdict(False, "streams", f"{self.per_user} at once", STREAM_RETRY_AFTER_S)
