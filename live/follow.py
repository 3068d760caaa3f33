"""What one event stream sends and when it ends, shared by the thread and asyncio servers.

A stream follows one run (turn or job) of a session: it starts at a cursor (the client's
`Last-Event-ID`, or just before the run began), sends what it finds after it, and ends
with the followed run's `done` or `error`. `step()` never blocks, so the same rules serve a
blocking generator (WSGI fallback, tests) and an asyncio coroutine (the server).

When the client's cursor is older than what the session still buffers, the first frame is
`replay.gap` (`{"after", "oldest"}`) with the id of the newest event that may be missing,
so the client reloads the messages and a reconnect with that id does not see the hole again.

When the shared event log does not answer (Redis away: `EventsUnavailable`), the stream ends
with an `error` event (code `live_state_unavailable`, status 503) instead of being cut: a
client then knows its stream is over and why. That event is not stored; its id is the last
one the stream sent, so a reconnect resumes right after what the client has.
"""

from __future__ import annotations

from dataclasses import dataclass

from foundation.events import EventName
from live.bus import Event, EventsUnavailable, Wakeup, make_event
from live.interfaces import EventLog

UNAVAILABLE_MESSAGE = "the live state of turns (Redis) does not answer; reload the messages in a moment"


@dataclass(frozen=True)
class FollowPlan:
    session_id: str
    after: int  # send events with a larger id
    turn_id: str | None  # the run whose end ends the stream (None: the first end seen)
    only_turn: bool = False  # skip other runs' events (a streamed POST shows only its own turn)
    from_client: bool = False  # `after` is the client's Last-Event-ID: report holes before it
    until_terminal: bool = True  # False: the trace feed, which never ends by itself
    replay_only: bool = False  # nothing to follow: send what is buffered after `after`, then end


class StreamFollower:
    def __init__(self, bus: EventLog, plan: FollowPlan) -> None:
        self.bus = bus
        self.plan = plan
        self.cursor = plan.after
        self._check_gap = plan.from_client
        self.over = False  # the stream ended with an `error` of its own (the log did not answer)

    def step(self) -> tuple[list[Event], bool]:
        """Events to send now, and whether the stream is over after them."""
        plan = self.plan
        if self.over:
            return [], True
        try:
            snapshot = self.bus.read(plan.session_id, self.cursor)
        except EventsUnavailable:
            return [self._unavailable()], True
        out: list[Event] = []
        if self._check_gap and snapshot.gap is not None:
            data = {"turn_id": plan.turn_id, "after": self.cursor, "oldest": snapshot.oldest}
            out.append(make_event(snapshot.gap, EventName.REPLAY_GAP, data))
            self.cursor = snapshot.gap
        self._check_gap = False
        for event in snapshot.events:
            if event.id <= self.cursor:
                continue
            self.cursor = event.id
            if plan.only_turn and event.turn_id != plan.turn_id:
                continue
            out.append(event)
            if plan.until_terminal and event.terminal and plan.turn_id in (None, event.turn_id):
                return out, True
        return out, plan.replay_only

    def heartbeat(self) -> Event:
        """A heartbeat, or the stream's end when the log does not answer (`step` then ends it)."""
        try:
            return self.bus.heartbeat()
        except EventsUnavailable:
            return self._unavailable()

    def wait(self, timeout: float) -> bool:
        """Block until there may be something to send (True) or `timeout`. A log that does not
        answer says True: the next `step` finds out and ends the stream."""
        try:
            return self.bus.wait(self.plan.session_id, self.cursor, timeout)
        except EventsUnavailable:
            return True

    async def wait_async(self, timeout: float, wakeup: Wakeup) -> bool:
        """`wait` without a thread (see `EventLog.wait_async`)."""
        try:
            return await self.bus.wait_async(self.plan.session_id, self.cursor, timeout, wakeup)
        except EventsUnavailable:
            return True

    def _unavailable(self) -> Event:
        self.over = True
        data = {
            "turn_id": self.plan.turn_id,
            "session_id": self.plan.session_id,
            "error": {"code": EventsUnavailable.code, "message": UNAVAILABLE_MESSAGE},
            "status": 503,
        }
        return make_event(self.cursor, EventName.ERROR, data)
