"""The active-turn registry: one running turn per session, and how to stop it (SPEC 4, 7a).

A turn (a chat turn, a widget answer's continuation, a problem-generation job) starts by
claiming its session; a second claim while one runs raises `TurnInProgress` with the
running turn's id (the HTTP layer answers 409 `turn_in_progress`). The lease carries the
turn's `CancelToken`; `cancel()` sets it from any thread. The turn's end is published and
the lease released under one lock (`finish`), so a client that has just received `done`
can start the next turn at once, and a stream that finds no active turn finds the end
(the bus keeps the latest end of each session). The lease's `outcome` says how the turn
ended, in no transport's words: its answer or a `TurnFailure` with a code.

This is the in-process `TurnBoard` (live/interfaces.py); with REDIS_URL the board is
`live.redis_turns.RedisTurnBoard`, shared by every server process, with the same rules.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from foundation.cancellation import CancelToken
from storage.db import utc_now

FailureCode = Literal["provider_unavailable", "storage_unavailable", "internal_error"]


@dataclass(frozen=True)
class TurnDone:
    """A turn that ended with its answer: the `done` event's data, `turn_id` included."""

    answer: dict[str, Any]


@dataclass(frozen=True)
class TurnFailure:
    """A turn that ended without its answer: a stable `code`, a message a user may read, and
    where it was (`user_message_id` when its user message was stored)."""

    turn_id: str
    session_id: str
    code: FailureCode
    message: str
    user_message_id: int | None = None
    details: dict[str, Any] | None = None  # e.g. `{"reason": "unreachable"}` of provider_unavailable


TurnOutcome = TurnDone | TurnFailure  # how a finished turn ended (the HTTP layer maps it to an answer)


class TurnInProgress(Exception):
    """The session already has a running turn."""

    def __init__(self, turn_id: str) -> None:
        super().__init__(f"turn {turn_id} is still running")
        self.turn_id = turn_id


@dataclass(eq=False)
class TurnLease:
    """A running turn: who it is, where its events start, how to stop it, its outcome."""

    session_id: str
    kind: str
    start_cursor: int  # every event of this turn has a larger id
    turn_id: str = field(default_factory=lambda: f"turn_{uuid.uuid4().hex}")
    started_at: str = field(default_factory=utc_now)
    token: CancelToken = field(default_factory=CancelToken)
    outcome: Future[TurnOutcome] = field(default_factory=Future)
    started: bool = False  # its work was handed to a worker: only `finish` may release it now
    claimed_at: float = field(default_factory=time.monotonic)

    def unstarted_for(self, seconds: float) -> bool:
        """A claim whose turn never started for this long: a request that claimed and then
        died between its checks (`live/desk.py`'s block gives a claim back on every way out;
        this is the backstop for a thread that never reaches it)."""
        return not self.started and time.monotonic() - self.claimed_at >= seconds


UNSTARTED_GRACE_S = 10.0  # a claimed session's checks take milliseconds; past this nothing will start it


class TurnRegistry:
    """Active turns by session; thread-safe; one instance per app."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: dict[str, TurnLease] = {}

    def claim(self, session_id: str, kind: str, start_cursor: int) -> TurnLease:
        with self._lock:
            running = self._active.get(session_id)
            if running is not None and not running.unstarted_for(UNSTARTED_GRACE_S):
                raise TurnInProgress(running.turn_id)
            lease = TurnLease(session_id=session_id, kind=kind, start_cursor=start_cursor)
            self._active[session_id] = lease
            return lease

    def active(self, session_id: str) -> TurnLease | None:
        with self._lock:
            return self._active.get(session_id)

    def cancel(self, session_id: str, turn_id: str | None = None) -> str | None:
        """Stop the session's running turn (only if it is `turn_id`, when given)."""
        with self._lock:
            lease = self._active.get(session_id)
            if lease is None or (turn_id is not None and lease.turn_id != turn_id):
                return None
        lease.token.cancel("stopped by the user")
        return lease.turn_id

    def finish(self, lease: TurnLease, publish_end: Callable[[], object], outcome: TurnOutcome) -> None:
        """Publish the turn's terminal event and release the session, atomically for `claim`."""
        try:
            with self._lock:
                try:
                    publish_end()
                finally:
                    if self._active.get(lease.session_id) is lease:
                        del self._active[lease.session_id]
        finally:
            lease.outcome.set_result(outcome)

    def abandon(self, lease: TurnLease) -> None:
        """Release a claim whose turn never started (a check failed after claiming)."""
        with self._lock:
            if not lease.started and self._active.get(lease.session_id) is lease:
                del self._active[lease.session_id]
        if not lease.started and not lease.outcome.done():
            lease.outcome.cancel()
