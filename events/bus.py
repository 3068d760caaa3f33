"""A per-session event bus: publish with increasing ids, replay from a bounded buffer.

Every event of a session gets the next id of that session's counter; subscribers that
reconnect with `Last-Event-ID` get what they missed, as long as it is still in the
buffer (the oldest events are dropped first). A `done` event (or a terminal `error`)
ends a stream: a subscriber that arrives after it still receives it and is closed.

Payloads are built by the publishers from sizes, names, ids and timings only; the bus
also refuses keys that would carry text (`PRIVATE_KEYS`) as a second line of defence.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

START_EVENTS = frozenset({"turn.started", "job.started"})
TERMINAL_EVENTS = frozenset({"done", "error"})
PRIVATE_KEYS = frozenset({"prompt", "messages", "content", "reply", "text", "reference_solution", "tests", "hidden_tests"})
DEFAULT_BUFFER = 512
HEARTBEAT_S = 15.0
IDLE_SESSION_TTL_S = 3600.0


class PrivatePayloadError(ValueError):
    """An event payload tried to carry text that must never leave the server."""


@dataclass(frozen=True)
class Event:
    id: int
    name: str
    data: dict[str, Any]
    at: float  # time.time() at publication, for delivery-delay measurements

    @property
    def terminal(self) -> bool:
        return self.name in TERMINAL_EVENTS and self.data.get("final", True)


@dataclass
class _Channel:
    buffer: deque[Event]
    condition: threading.Condition = field(default_factory=threading.Condition)
    next_id: int = 1
    touched: float = field(default_factory=time.monotonic)


class EventBus:
    """Channels by session id; thread-safe; one instance per app (no module state)."""

    def __init__(self, buffer_size: int = DEFAULT_BUFFER, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.buffer_size = buffer_size
        self.heartbeat_s = heartbeat_s
        self._channels: dict[str, _Channel] = {}
        self._lock = threading.Lock()

    def _channel(self, session_id: str) -> _Channel:
        with self._lock:
            channel = self._channels.get(session_id)
            if channel is None:
                channel = self._channels[session_id] = _Channel(deque(maxlen=self.buffer_size))
                self._forget_idle()
            channel.touched = time.monotonic()
            return channel

    def _forget_idle(self) -> None:
        """Drop channels nobody used for an hour (called with the lock held)."""
        cutoff = time.monotonic() - IDLE_SESSION_TTL_S
        for key in [key for key, channel in self._channels.items() if channel.touched < cutoff]:
            del self._channels[key]

    def publish(self, session_id: str, name: str, data: dict[str, Any] | None = None) -> Event:
        """Buffer and deliver one event. Only `done` may carry the turn's answer (the same
        JSON the HTTP answer has); every other payload is refused if it has text keys."""
        payload = dict(data or {})
        leaked = PRIVATE_KEYS.intersection(payload)
        if leaked and name != "done":
            raise PrivatePayloadError(f"event {name!r} may not carry {sorted(leaked)}")
        return self._emit(session_id, name, payload, buffered=True)

    def heartbeat(self, session_id: str) -> Event:
        """A heartbeat with its own id, delivered to no one else and never replayed."""
        return self._emit(session_id, "heartbeat", {}, buffered=False)

    def _emit(self, session_id: str, name: str, payload: dict[str, Any], *, buffered: bool) -> Event:
        channel = self._channel(session_id)
        with channel.condition:
            event = Event(id=channel.next_id, name=name, data=payload, at=time.time())
            channel.next_id += 1
            if buffered:
                channel.buffer.append(event)
                channel.condition.notify_all()
        return event

    def last_id(self, session_id: str) -> int:
        channel = self._channel(session_id)
        with channel.condition:
            return channel.next_id - 1

    def start_cursor(self, session_id: str) -> int:
        """Where a subscriber without `Last-Event-ID` starts: just before the latest run
        (turn or job) still in the buffer, so a late subscriber sees that run whole,
        including its end if it already finished; with no run buffered, from now on."""
        channel = self._channel(session_id)
        with channel.condition:
            for event in reversed(channel.buffer):
                if event.name in START_EVENTS:
                    return event.id - 1
            return channel.next_id - 1

    def subscribe(
        self, session_id: str, last_event_id: int | None = None, *, max_wait_s: float | None = None,
        until_terminal: bool = True,
    ) -> Iterator[Event | None]:
        """Yield events after `last_event_id`, then new ones as they come; `None` = heartbeat due.

        Ends after a terminal event (unless `until_terminal` is False: the trace feed), or
        after `max_wait_s` (a bound for tests and for clients that only want a replay).
        """
        channel = self._channel(session_id)
        cursor = self.start_cursor(session_id) if last_event_id is None else last_event_id
        deadline = None if max_wait_s is None else time.monotonic() + max_wait_s
        while True:
            with channel.condition:
                pending = [event for event in channel.buffer if event.id > cursor]
                if not pending:
                    wait = self.heartbeat_s
                    if deadline is not None:
                        wait = min(wait, deadline - time.monotonic())
                        if wait <= 0:
                            return
                    channel.condition.wait(timeout=max(wait, 0.0))
                    pending = [event for event in channel.buffer if event.id > cursor]
            if not pending:
                yield None
                continue
            for event in pending:
                cursor = event.id
                yield event
                if until_terminal and event.terminal:
                    return
