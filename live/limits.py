"""Per-user budgets: how many actions in a moving window (`RateLimiter`), and how many
event streams open at once (`StreamSlots`, or `RedisStreamSlots` with REDIS_URL).

Both answer a `Verdict` and never block. The counting itself is the `limits` library's
moving window (each hit is a timestamp; a key holds at most its budget of them and is
dropped when they expire), over a storage named by URI: `memory://` in-process today, and
`redis://…` when several processes must share the budgets (SPEC 13) without changing any
caller.

Open streams are a live count, not a rate. In one process it is a dict of counts. With
several processes (SPEC 13: `MAX_STREAMS_PER_USER` holds across them) each open stream is a
seat in its user's sorted set in Redis, scored by the seat's lease deadline: a Lua script
takes a seat only while the user holds fewer than the cap (expired seats dropped first), the
stream's end removes it, and each process renews its own seats every third of the lease, so
the seats of a process killed with its streams open are free again within one lease.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

import redis
from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

from config.settings import Rate, RateLimits
from live.redis_conn import RedisLink, answering

log = logging.getLogger("events.redis")

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

    def allows(self, limit: str, *identity: str) -> Verdict:
        """Whether one more would be allowed now; nothing is counted."""
        item = self._items.get(limit)
        if item is None or self._window.test(item, limit, *identity):
            return ALLOWED
        return self._refusal(limit, item, identity)

    def untouched(self, limit: str, *identity: str) -> bool:
        """Whether nothing was counted under `identity` in the current window."""
        item = self._items.get(limit)
        if item is None:
            return True
        return self._window.get_window_stats(item, limit, *identity).remaining >= item.amount

    def _refusal(self, limit: str, item: RateLimitItem, identity: tuple[str, ...]) -> Verdict:
        reset = self._window.get_window_stats(item, limit, *identity).reset_time
        return Verdict(False, limit, str(self._rules[limit]), max(1, math.ceil(reset - time.time())))


class StreamSeats(Protocol):
    """How many event streams each user holds open, at most `per_user` at once."""

    per_user: int

    def take(self, user_id: int) -> Verdict:
        """A seat for a stream starting now, or the refusal (429) when the user holds the maximum."""
        ...

    def room(self, user_id: int) -> Verdict:
        """Whether `take` would allow one now (nothing taken)."""
        ...

    def give_back(self, user_id: int) -> None:
        """One of the user's streams (taken here) ended."""
        ...

    def held(self, user_id: int) -> int: ...


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


_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
"""

# KEYS: the user's seats. ARGV: per user, seat, lease ms. Returns 1 when taken.
_TAKE = (
    _NOW_MS
    + """
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
)

# KEYS: the user's seats. Returns how many are held.
_HELD = _NOW_MS + "return redis.call('ZCARD', KEYS[1])\n"

# KEYS: the user's seats. ARGV: lease ms, then this process's seats of the user.
_RENEW = (
    _NOW_MS
    + """
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
"""
)


class RedisStreamSlots:
    """`StreamSeats` counted in Redis across every process (see the module doc); thread-safe;
    one per app process, with one thread renewing its seats until `close`."""

    def __init__(self, link: RedisLink, per_user: int, *, lease_s: float) -> None:
        self.per_user = per_user
        self.link = link
        self.lease_ms = int(lease_s * 1000)
        self.renew_every_s = lease_s / 3
        client = link.client
        self._take = client.register_script(_TAKE)
        self._held = client.register_script(_HELD)
        self._renew = client.register_script(_RENEW)
        self._prefix = f"{uuid.uuid4().hex}:"  # this process's seats (a seat names its process)
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._mine: dict[int, list[str | None]] = {}  # user -> this process's seats (None: Redis was away)
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew_loop, name="stream-seat-keeper", daemon=True)
        self._renewer.start()

    def take(self, user_id: int) -> Verdict:
        seat = f"{self._prefix}{next(self._numbers)}"
        kept: str | None = seat
        try:
            if not self._take(keys=[self.link.keys.seats(user_id)], args=[self.per_user, seat, self.lease_ms]):
                return self._refusal()
        except redis.RedisError as error:  # the stream itself will meet Redis away and end with an `error`
            log.warning("taking a stream seat in Redis failed: %s", error)
            kept = None
        with self._lock:
            self._mine.setdefault(user_id, []).append(kept)
        return ALLOWED

    def room(self, user_id: int) -> Verdict:
        with answering():  # a view's check: Redis away answers 503
            held = int(self._held(keys=[self.link.keys.seats(user_id)]))
        return ALLOWED if held < self.per_user else self._refusal()

    def give_back(self, user_id: int) -> None:
        with self._lock:
            seats = self._mine.get(user_id)
            if not seats:
                return
            seat = seats.pop()
            if not seats:
                del self._mine[user_id]
        if seat is None:
            return
        try:
            self.link.client.zrem(self.link.keys.seats(user_id), seat)
        except redis.RedisError as error:  # no longer renewed: it expires within a lease
            log.warning("giving back a stream seat in Redis failed: %s", error)

    def held(self, user_id: int) -> int:
        with answering():
            return int(self._held(keys=[self.link.keys.seats(user_id)]))

    def _refusal(self) -> Verdict:
        return Verdict(False, "streams", f"{self.per_user} at once", STREAM_RETRY_AFTER_S)

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_every_s):
            with self._lock:
                held = {user: [seat for seat in seats if seat] for user, seats in self._mine.items()}
            try:
                for user_id, seats in held.items():
                    if seats:
                        self._renew(keys=[self.link.keys.seats(user_id)], args=[self.lease_ms, *seats])
            except redis.RedisError as error:  # Redis away for a moment: try again next time
                log.warning("renewing stream seats in Redis failed: %s", error)

    def close(self) -> None:
        self._stop.set()
        self._renewer.join(5)
