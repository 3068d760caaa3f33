"""One process's link to the shared Redis of live turns: clients, key names, and the listener.

Every Redis-backed part of `Live` (`live/redis_bus.py`, `live/redis_turns.py`) takes a
`RedisLink`: a connection pool for commands, the key names under one prefix (so tests, or
two deployments, can share a server), and ONE listener thread per process subscribed to the
pub/sub channels. The listener is what lets another process's publish wake this process's
streams and another process's cancel reach this process's turn: handlers are registered per
channel and run on the listener thread (they must be quick: set a flag, schedule a wake-up).

After a lost connection the listener tells each channel (`on_lost`: the event log wakes its
streams, which then find Redis away and end with an `error` instead of hanging until their
next heartbeat), reconnects (backing off up to `MAX_BACKOFF_S`) and calls each channel's
`on_resync`, because messages sent while it was away are lost: the waiters then re-read Redis
instead of waiting for a message that never comes. A Redis that stops answering while serving
is reported as `LiveStateUnavailable` (`answering()`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from redis.client import PubSub

from live.bus import EventsUnavailable
from live.redis_outbox import Outbox

log = logging.getLogger("events.redis")

DEFAULT_PREFIX = "orchestrator:"
POLL_S = 0.25  # how often the listener looks at its stop flag while idle
MAX_BACKOFF_S = 5.0
SUBSCRIBE_TIMEOUT_S = 10.0
SOCKET_TIMEOUT_S = 5.0  # a Redis that stops answering holds a request (or the event loop) at most this long

Handler = Callable[[str], None]


class RedisUnavailable(Exception):
    """Redis did not answer at start-up (REDIS_URL is set, so the app cannot run without it)."""


class LiveStateUnavailable(EventsUnavailable, redis.ConnectionError):
    """Redis stopped answering while serving: an event stream ends with an `error`
    (`EventsUnavailable`), a request answers 503 as for any Redis error (`api/errors.py`)."""


@contextmanager
def answering() -> Iterator[None]:
    """Report a Redis that does not answer as `LiveStateUnavailable`."""
    try:
        yield
    except LiveStateUnavailable:
        raise
    except redis.RedisError as error:
        raise LiveStateUnavailable(f"Redis does not answer: {error}") from error


@dataclass(frozen=True)
class RedisKeys:
    """Key and channel names, all under `prefix` (one Redis can serve tests or deployments apart)."""

    prefix: str = DEFAULT_PREFIX

    @property
    def counter(self) -> str:
        return f"{self.prefix}ids"  # the last event id issued

    @property
    def epoch(self) -> str:
        return f"{self.prefix}ids:epoch"  # ids up to this one came before this Redis's memory

    @property
    def bytes(self) -> str:
        return f"{self.prefix}bytes"  # the sessions' events' bytes, counted against the total budget

    @property
    def sizes(self) -> str:
        return f"{self.prefix}sizes"  # hash: session -> its bytes

    @property
    def recent(self) -> str:
        return f"{self.prefix}recent"  # sorted set: sessions by last publish (µs), least recent first

    def stream(self, session_id: str) -> str:
        return f"{self.prefix}ev:{{{session_id}}}"

    def meta(self, session_id: str) -> str:
        return f"{self.prefix}meta:{{{session_id}}}"  # hash: last, floor, end, end_turn (see _REAP too)

    def turn(self, session_id: str) -> str:
        return f"{self.prefix}turn:{{{session_id}}}"  # also spelt out in redis_turns._REAP

    @property
    def claims(self) -> str:
        return f"{self.prefix}claims"  # sorted set: `<session> <turn>` by lease deadline (ms)

    def seats(self, user_id: int) -> str:
        return f"{self.prefix}seats:{{{user_id}}}"  # sorted set: a user's open streams by lease deadline (ms)

    def cancel_flag(self, turn_id: str) -> str:
        return f"{self.prefix}cancel:{turn_id}"

    @property
    def wake_channel(self) -> str:
        return f"{self.prefix}wake"

    @property
    def cancel_channel(self) -> str:
        return f"{self.prefix}cancel"


@dataclass(frozen=True)
class Subscription:
    on_message: Handler
    on_resync: Callable[[], None]
    on_lost: Callable[[], None] | None = None


class RedisLink:
    """A client (thread-safe pool) plus the process's single listener thread."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self.client = client
        self.keys = keys
        self.outbox = Outbox(client)  # calls a turn need not wait for (live/redis_outbox.py)
        self._handlers: dict[str, Subscription] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, url: str, prefix: str = DEFAULT_PREFIX) -> RedisLink:
        client = redis.Redis.from_url(
            url,
            decode_responses=True,
            encoding_errors="surrogatepass",  # text is stored as Python has it, lone surrogates included
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
        )
        try:
            client.ping()
        except redis.RedisError as error:
            client.close()
            raise RedisUnavailable(f"REDIS_URL does not answer: {error}") from error
        return cls(client, RedisKeys(prefix))

    def subscribe(
        self,
        channel: str,
        on_message: Handler,
        on_resync: Callable[[], None],
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        """Deliver `channel`'s messages to `on_message` (on the listener thread); `on_lost` is
        called each time the listener loses Redis (nothing will be heard until `on_resync`).
        Call before `start`."""
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("subscribe before the listener starts")
            self._handlers[channel] = Subscription(on_message, on_resync, on_lost)

    def start(self) -> None:
        """Start the listener and wait until it is subscribed (a publish after this is seen)."""
        with self._lock:
            if self._thread is not None or not self._handlers:
                return
            self._thread = threading.Thread(target=self._listen, name="redis-listener", daemon=True)
            self._thread.start()
        if not self._ready.wait(SUBSCRIBE_TIMEOUT_S):
            raise RedisUnavailable("the Redis listener could not subscribe")

    def _listen(self) -> None:
        backoff = 0.1
        first = True
        while not self._stop.is_set():
            pubsub = self.client.pubsub()  # type: ignore[no-untyped-call]
            try:
                self._subscribe(pubsub)
                if not first:
                    self._resync()
                first = False
                self._ready.set()
                backoff = 0.1
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=POLL_S)
                    if message is not None and message.get("type") == "message":
                        self._dispatch(str(message["channel"]), str(message["data"]))
            except (redis.ConnectionError, redis.TimeoutError) as error:
                if self._stop.is_set():
                    return
                log.warning("Redis listener lost its connection (%s); reconnecting in %.1f s", error, backoff)
                self._lost()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            finally:
                try:
                    pubsub.close()
                except redis.RedisError:
                    pass

    def _subscribe(self, pubsub: PubSub) -> None:
        """Subscribe to every channel and wait for each confirmation (bounded)."""
        pubsub.subscribe(*self._handlers)
        confirmed = 0
        for _ in range(int(SUBSCRIBE_TIMEOUT_S / POLL_S)):
            if confirmed >= len(self._handlers) or self._stop.is_set():
                return
            message = pubsub.get_message(timeout=POLL_S)
            if message is None:
                continue
            if message.get("type") == "subscribe":
                confirmed += 1
            elif message.get("type") == "message":
                self._dispatch(str(message["channel"]), str(message["data"]))
        if confirmed < len(self._handlers):
            raise redis.ConnectionError("no confirmation of the subscription")

    def _dispatch(self, channel: str, data: str) -> None:
        subscription = self._handlers.get(channel)
        if subscription is None:
            return
        try:
            subscription.on_message(data)
        except Exception:  # one bad message must not stop the listener
            log.exception("Redis listener: handler of %s failed", channel)

    def _lost(self) -> None:
        for subscription in self._handlers.values():
            if subscription.on_lost is None:
                continue
            try:
                subscription.on_lost()
            except Exception:
                log.exception("Redis listener: on_lost failed")

    def _resync(self) -> None:
        for subscription in self._handlers.values():
            try:
                subscription.on_resync()
            except Exception:
                log.exception("Redis listener: resync failed")

    def close(self) -> None:
        self.outbox.close()  # what is queued is sent first
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(POLL_S * 3)
        self.client.close()
