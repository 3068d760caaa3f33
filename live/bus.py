"""The in-process event bus: per-session channels, bounded replay, sync and async waiting.

Every event gets the next id of one `IdClock` (increasing within a session, never reused,
also across restarts). Each session's channel keeps a replay buffer bounded in BYTES, per
session and in total, so a few hundred long answers cannot hold hundreds of megabytes:
the oldest entries go first (least recently used sessions first under the total budget),
and the channel remembers the newest id it dropped (`floor`), so a subscriber asking for
events after an older id is told about the hole (`Snapshot.gap`) instead of silently
missing it.

`answer.delta` events of one turn and pass are kept as one compact run (the text, plus an
id per piece), not as thousands of event objects: a replay from any id inside the run
returns one delta holding exactly the text after that id.

The payload policy is checked here as a second line of defence: only `done` (the turn's
JSON answer), `error` and `answer.delta` (published answer text) may carry text keys.

Waiting: threads block on a per-channel condition (the WSGI fallback, tests); asyncio
streams register a `Wakeup` (a future and a timer) that `publish` fires through its loop,
once per loop whatever the number of watchers, so an idle async stream costs a set entry
and a future, not a thread.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from array import array
from bisect import bisect_right
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from foundation.events import TERMINAL_EVENTS, TEXT_EVENTS, EventName
from live.ids import IdClock

PRIVATE_KEYS = frozenset(
    {"prompt", "messages", "content", "reply", "text", "reference_solution", "tests", "hidden_tests"}
)
DELTA = EventName.ANSWER_DELTA
HEARTBEAT_S = 15.0
IDLE_SESSION_TTL_S = 3600.0
SESSION_BUDGET_BYTES = 1 << 20  # replay kept per session
TOTAL_BUDGET_BYTES = 64 << 20  # replay kept for all sessions together
EVENT_OVERHEAD_BYTES = 160  # the Python objects around an event's JSON, roughly
PIECE_OVERHEAD_BYTES = 16  # two array slots per delta piece
COMPACT_PIECES = 64  # join a run's pieces into one string this often


class Wakeup:
    """One asyncio stream's alarm: a plain future per wait (no task, no `asyncio.Event`).

    An idle stream is mostly this object and its connection, so it is kept small; `fire`
    may be called by the bus (an event arrived), a timer (heartbeat due) or the stream
    itself (the client went away). Loop thread only.
    """

    __slots__ = ("_future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._future: asyncio.Future[None] | None = None

    def fire(self) -> None:
        if self._future is not None and not self._future.done():
            self._future.set_result(None)

    async def sleep(self, timeout: float) -> None:
        """Until `fire` or `timeout`, whichever comes first."""
        self._future = self.loop.create_future()
        timer = self.loop.call_later(timeout, self.fire)
        try:
            await self._future
        finally:
            timer.cancel()
            self._future = None


def _fire_all(wakeups: list[Wakeup]) -> None:
    for wakeup in wakeups:
        wakeup.fire()


class EventsUnavailable(Exception):
    """The store of a shared event log does not answer (Redis away): a stream that meets it
    ends with an `error` event (`live/follow.py`), a request answers 503."""

    code = "live_state_unavailable"


class PrivatePayloadError(ValueError):
    """An event payload tried to carry text that must never leave the server."""


def checked_payload(name: str, data: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of `data` once it obeys the payload policy (every backend publishes through it)."""
    payload = dict(data or {})
    leaked = PRIVATE_KEYS.intersection(payload)
    if leaked and name not in TEXT_EVENTS:
        raise PrivatePayloadError(f"event {name!r} may not carry {sorted(leaked)}")
    if name == DELTA and set(payload) != {"turn_id", "pass", "text"}:
        raise ValueError("answer.delta carries exactly turn_id, pass and text")
    return payload


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    name: str
    data: dict[str, Any]
    at: float  # time.time() at publication, for delivery-delay measurements
    json: str  # `data` serialised once, however many subscribers read it

    @property
    def turn_id(self) -> str | None:
        value = self.data.get("turn_id")
        return value if isinstance(value, str) else None

    @property
    def terminal(self) -> bool:
        return self.name in TERMINAL_EVENTS

    @property
    def size(self) -> int:
        return len(self.json) + EVENT_OVERHEAD_BYTES


_encode = json.JSONEncoder(ensure_ascii=False).encode  # built once: `json.dumps` builds one per call


def make_event(event_id: int, name: str, data: dict[str, Any], at: float | None = None) -> Event:
    return Event(event_id, name, data, time.time() if at is None else at, _encode(data))


class _DeltaRun:
    """Consecutive `answer.delta` events of one turn and pass, stored as text plus ids."""

    __slots__ = ("at", "ends", "ids", "length", "pass_", "pieces", "turn_id")

    def __init__(self, turn_id: str, pass_: int) -> None:
        self.turn_id = turn_id
        self.pass_ = pass_
        self.ids = array("q")
        self.ends = array("q")  # text length after each piece
        self.pieces: list[str] = []
        self.length = 0
        self.at = 0.0

    def add(self, event_id: int, text: str, at: float) -> None:
        self.pieces.append(text)
        if len(self.pieces) >= COMPACT_PIECES:
            self.pieces = ["".join(self.pieces)]
        self.length += len(text)
        self.ids.append(event_id)
        self.ends.append(self.length)
        self.at = at

    @property
    def first_id(self) -> int:
        return self.ids[0]

    @property
    def last_id(self) -> int:
        return self.ids[-1]

    @property
    def size(self) -> int:
        return self.length + PIECE_OVERHEAD_BYTES * len(self.ids) + EVENT_OVERHEAD_BYTES

    def after(self, cursor: int) -> Event:
        """One delta holding the text of every piece with an id above `cursor`."""
        index = bisect_right(self.ids, cursor)
        start = self.ends[index - 1] if index else 0
        text = "".join(self.pieces)
        self.pieces = [text]
        data = {"turn_id": self.turn_id, "pass": self.pass_, "text": text[start:]}
        return make_event(self.last_id, DELTA, data, self.at)


Entry = Event | _DeltaRun


def _first_id(entry: Entry) -> int:
    return entry.first_id if isinstance(entry, _DeltaRun) else entry.id


def _last_id(entry: Entry) -> int:
    return entry.last_id if isinstance(entry, _DeltaRun) else entry.id


@dataclass(frozen=True)
class Snapshot:
    """What a subscriber reads: events after its cursor, and the hole before them, if any."""

    events: list[Event]
    gap: int | None  # ids up to this one may be missing after the cursor (None: nothing missing)
    oldest: int | None  # the oldest id still buffered


@dataclass(eq=False)
class _Channel:
    floor: int  # events with an id up to this one may be gone (before this process, or dropped)
    condition: threading.Condition
    entries: deque[Entry] = field(default_factory=deque)
    size: int = 0
    last_id: int = 0
    last_terminal: Event | None = None  # kept (and counted in `size`) even when its entry is dropped
    touched: float = field(default_factory=time.monotonic)
    waiters: set[Wakeup] = field(default_factory=set)
    sync_waiting: int = 0

    @property
    def busy(self) -> bool:
        return bool(self.waiters) or self.sync_waiting > 0


class EventBus:
    """Channels by session id; thread-safe; one instance per app (no module state)."""

    def __init__(
        self,
        ids: IdClock | None = None,
        *,
        heartbeat_s: float = HEARTBEAT_S,
        session_budget_bytes: int = SESSION_BUDGET_BYTES,
        total_budget_bytes: int = TOTAL_BUDGET_BYTES,
        idle_ttl_s: float = IDLE_SESSION_TTL_S,
    ) -> None:
        self.ids = ids or IdClock()
        self.heartbeat_s = heartbeat_s
        self.session_budget = session_budget_bytes
        self.total_budget = total_budget_bytes
        self.idle_ttl_s = idle_ttl_s
        self._lock = threading.Lock()
        self._channels: OrderedDict[str, _Channel] = OrderedDict()  # least recently used first
        self._size = 0
        self._dropped = 0  # the newest id of any channel dropped whole: a channel made again starts above it

    # ------------------------------------------------------------------ channels

    def _channel(self, session_id: str) -> _Channel:
        """The session's channel, created on first use (called with the lock held)."""
        channel = self._channels.get(session_id)
        if channel is None:
            self._forget_idle()
            floor = max(self.ids.first - 1, self._dropped)  # a cursor from a dropped channel sees its hole
            channel = _Channel(floor=floor, condition=threading.Condition(self._lock))
            self._channels[session_id] = channel
        else:
            self._channels.move_to_end(session_id)
        channel.touched = time.monotonic()
        return channel

    def _forget_idle(self) -> None:
        cutoff = time.monotonic() - self.idle_ttl_s
        for key in [key for key, channel in self._channels.items() if channel.touched < cutoff and not channel.busy]:
            self._drop_channel(key)

    def _drop_channel(self, session_id: str) -> None:
        channel = self._channels.pop(session_id)
        self._size -= channel.size
        self._dropped = max(self._dropped, channel.last_id)

    def _drop_oldest(self, channel: _Channel) -> bool:
        """Drop the oldest entry; the latest terminal stays (and stays counted) while pinned."""
        if not channel.entries:
            return False
        entry = channel.entries.popleft()
        if entry is not channel.last_terminal:
            channel.size -= entry.size
            self._size -= entry.size
        channel.floor = max(channel.floor, _last_id(entry))
        return True

    def _enforce_budgets(self, current: _Channel) -> None:
        while current.size > self.session_budget and len(current.entries) > 1 and self._drop_oldest(current):
            pass
        if self._size <= self.total_budget:  # the usual case: no scan of every session
            return
        for key in list(self._channels):
            if self._size <= self.total_budget:
                return
            channel = self._channels[key]
            if channel is current:
                continue
            while self._size > self.total_budget and self._drop_oldest(channel):
                pass
            if not channel.entries and not channel.busy:
                self._drop_channel(key)

    # ------------------------------------------------------------------ publishing

    def publish(self, session_id: str, name: EventName, data: dict[str, Any] | None = None) -> Event:
        """Buffer and deliver one event. Text keys only on `done`, `error` and `answer.delta`."""
        payload = checked_payload(name, data)
        with self._lock:
            event = make_event(self.ids.next(), name, payload)
            channel = self._channel(session_id)
            self._append(channel, event)
            self._published(channel, event.id, event if event.terminal else None)
        return event

    def post(self, session_id: str, name: EventName, data: dict[str, Any] | None = None) -> None:
        """`publish` without the event back: in this process it is delivered at once too. An
        `answer.delta` goes straight into its run (`_DeltaRun`): no event object, no JSON,
        which a reader builds from the run anyway."""
        if name != DELTA:
            self.publish(session_id, name, data)
            return
        payload = checked_payload(name, data)
        with self._lock:
            event_id = self.ids.next()
            channel = self._channel(session_id)
            self._append_delta(channel, event_id, payload["turn_id"], payload["pass"], payload["text"], time.time())
            self._published(channel, event_id, None)

    def _published(self, channel: _Channel, event_id: int, terminal: Event | None) -> None:
        """What follows every append (lock held): the channel's newest id, the pinned end of
        its latest run, the budgets, and the wake-up of whoever waits on the channel."""
        channel.last_id = event_id
        if terminal is not None:
            self._unpin(channel)
            channel.last_terminal = terminal
        self._enforce_budgets(channel)
        if channel.sync_waiting:
            channel.condition.notify_all()
        if channel.waiters:
            self._wake(channel)

    @staticmethod
    def _wake(channel: _Channel) -> None:
        """Wake the channel's asyncio waiters with one call per loop (one self-pipe write),
        however many streams watch the session."""
        by_loop: dict[asyncio.AbstractEventLoop, list[Wakeup]] = {}
        for wakeup in channel.waiters:
            by_loop.setdefault(wakeup.loop, []).append(wakeup)
        for loop, wakeups in by_loop.items():
            loop.call_soon_threadsafe(_fire_all, wakeups)

    def _unpin(self, channel: _Channel) -> None:
        """Forget the previous terminal; uncount it if only the pin was keeping it."""
        old = channel.last_terminal
        # entries leave from the oldest end only, so the old end is still buffered exactly
        # when the oldest entry is not newer than it (O(1), not a scan of the buffer)
        if old is not None and not (channel.entries and _first_id(channel.entries[0]) <= old.id):
            channel.size -= old.size
            self._size -= old.size
        channel.last_terminal = None

    def _append(self, channel: _Channel, event: Event) -> None:
        if event.name == DELTA:
            data = event.data
            self._append_delta(channel, event.id, data["turn_id"], data["pass"], data["text"], event.at)
            return
        channel.entries.append(event)
        channel.size += event.size
        self._size += event.size

    def _append_delta(self, channel: _Channel, event_id: int, turn_id: str, pass_: int, text: str, at: float) -> None:
        """One `answer.delta` piece, added to the channel's last run (a new run for a new turn or pass)."""
        last = channel.entries[-1] if channel.entries else None
        if not (isinstance(last, _DeltaRun) and last.turn_id == turn_id and last.pass_ == pass_):
            last = _DeltaRun(turn_id, pass_)
            channel.entries.append(last)
            before = 0
        else:
            before = last.size
        last.add(event_id, text, at)
        grown = last.size - before
        channel.size += grown
        self._size += grown

    def heartbeat(self) -> Event:
        """A heartbeat with its own id, for one stream only: never buffered or replayed."""
        return make_event(self.ids.next(), EventName.HEARTBEAT, {})

    # ------------------------------------------------------------------ reading

    def position(self) -> int:
        """The newest id issued so far: a cursor from which every later event is new."""
        return self.ids.last

    def last_id(self, session_id: str) -> int:
        """The newest id published on this session (0 when none is known)."""
        with self._lock:
            channel = self._channels.get(session_id)
            return channel.last_id if channel else 0

    def last_terminal(self, session_id: str) -> Event | None:
        """The end (`done`/`error`) of the session's latest finished run, while remembered."""
        with self._lock:
            channel = self._channels.get(session_id)
            return channel.last_terminal if channel else None

    def read(self, session_id: str, after: int) -> Snapshot:
        """Everything buffered after `after`, oldest first, and whether some of it is gone."""
        with self._lock:
            channel = self._channel(session_id)
            found: list[Event] = []
            for entry in reversed(channel.entries):
                if _last_id(entry) <= after:
                    break
                found.append(entry.after(after) if isinstance(entry, _DeltaRun) else entry)
            found.reverse()
            terminal = channel.last_terminal
            oldest = _first_id(channel.entries[0]) if channel.entries else None
            if terminal is not None and terminal.id > after and (oldest is None or terminal.id < oldest):
                found.insert(0, terminal)  # its entry was dropped; the end of the run is still known
            gap = channel.floor if after < channel.floor else None
            return Snapshot(found, gap, oldest)

    def wait(self, session_id: str, after: int, timeout: float) -> bool:
        """Block until the session has an event after `after` (True) or `timeout` passes."""
        with self._lock:
            channel = self._channel(session_id)
            channel.sync_waiting += 1
            try:
                return channel.condition.wait_for(lambda: channel.last_id > after, timeout)
            finally:
                channel.sync_waiting -= 1

    async def wait_async(self, session_id: str, after: int, timeout: float, wakeup: Wakeup) -> bool:
        """Await an event after `after` (True), `timeout`, or `wakeup.fire()` from elsewhere
        (the stream's own reasons, e.g. its client went away)."""
        with self._lock:
            channel = self._channel(session_id)
            if channel.last_id > after:
                return True
            channel.waiters.add(wakeup)
        try:
            await wakeup.sleep(timeout)
        finally:
            with self._lock:
                channel.waiters.discard(wakeup)
                channel.touched = time.monotonic()
        with self._lock:
            return channel.last_id > after

    @property
    def buffered_bytes(self) -> int:
        with self._lock:
            return self._size
