"""The two interfaces of live turns: the session event log and the board of running turns.

The HTTP layer (`api/live.py`, `api/streams.py`, `api/sessions.py`) and the turn runner
(`live/runner.py`) only use these Protocols. Two backends satisfy them:

- in this process (`live.bus.EventBus`, `live.turns.TurnRegistry`): the default;
- in Redis (`live.redis_bus.RedisEventLog`, `live.redis_turns.RedisTurnBoard`), with
  `REDIS_URL`: several server processes on several hosts then share events (ids, replay),
  the active turn of each session, and cancellation (SPEC 13).

Both keep the same rules (SPEC 7, 7a): ids increase and are never reused, replay after a
cursor is bounded and a hole is reported (`Snapshot.gap`), payloads never carry private
text, one turn per session, and the end of a turn is published and the session released
in one step, so a client that got `done` can start the next turn at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from foundation.events import EventName
from live.bus import Event, Snapshot, Wakeup
from live.turns import TurnLease, TurnOutcome


class EventLog(Protocol):
    """Per-session events with integer ids, bounded replay and waiting (sync and asyncio)."""

    @property
    def heartbeat_s(self) -> float: ...

    def publish(self, session_id: str, name: EventName, data: dict[str, Any] | None = None) -> Event:
        """Store and deliver one event; raises `PrivatePayloadError` for text on other events."""
        ...

    def post(self, session_id: str, name: EventName, data: dict[str, Any] | None = None) -> None:
        """Store and deliver one event soon, in order with this process's other events, without
        waiting for a shared log's round trip (a turn's progress and deltas); a later `publish`
        comes after it. Checks the payload at once, as `publish` does."""
        ...

    def heartbeat(self) -> Event:
        """An event with its own id for one stream; never stored."""
        ...

    def position(self) -> int:
        """The newest id issued so far: every later event has a larger one."""
        ...

    def last_id(self, session_id: str) -> int:
        """The newest id published on the session (0 when none is known)."""
        ...

    def last_terminal(self, session_id: str) -> Event | None:
        """The end (`done`/`error`) of the session's latest finished run, while remembered."""
        ...

    def read(self, session_id: str, after: int) -> Snapshot:
        """The kept events after `after`, oldest first, and whether some are gone."""
        ...

    def wait(self, session_id: str, after: int, timeout: float) -> bool:
        """Block the thread until an event after `after` (True) or `timeout` (False)."""
        ...

    async def wait_async(self, session_id: str, after: int, timeout: float, wakeup: Wakeup) -> bool:
        """Await an event after `after`, `timeout`, or `wakeup.fire()`; holds no thread."""
        ...


class RunningTurn(Protocol):
    """What anyone may know about a session's running turn, whichever process runs it."""

    @property
    def session_id(self) -> str: ...

    @property
    def turn_id(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def start_cursor(self) -> int: ...

    @property
    def started_at(self) -> str: ...


class TurnBoard(Protocol):
    """One running turn per session: claim, look up, cancel, finish (SPEC 4, 7a)."""

    def claim(self, session_id: str, kind: str, start_cursor: int) -> TurnLease:
        """The session for a new turn run here; raises `TurnInProgress` while one runs."""
        ...

    def active(self, session_id: str) -> RunningTurn | None: ...

    def cancel(self, session_id: str, turn_id: str | None = None) -> str | None:
        """Stop the running turn (only if it is `turn_id`, when given), wherever it runs;
        its id, or None when there is none to stop."""
        ...

    def finish(self, lease: TurnLease, publish_end: Callable[[], object], outcome: TurnOutcome) -> None:
        """Publish the turn's terminal event and release the session, atomically for `claim`."""
        ...

    def abandon(self, lease: TurnLease) -> None:
        """Release a claim whose turn never started."""
        ...
