"""What one event stream sends and when it ends, shared by the thread and asyncio servers.

A stream follows one run (turn or job) of a session: it starts at a cursor (the client's
`Last-Event-ID`, or just before the run began), sends what it finds after it, and ends
with the followed run's `done` or `error`. `step()` never blocks, so the same rules serve a
blocking generator (WSGI fallback, tests) and an asyncio coroutine (the server).

When the client's cursor is older than what the session still buffers, the first frame is
`replay.gap` (`{"after", "oldest"}`) with the id of the newest event that may be missing,
so the client reloads the messages and a reconnect with that id does not see the hole again.
"""

from __future__ import annotations

from dataclasses import dataclass

from live.bus import Event, make_event
from live.interfaces import EventLog


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

    def step(self) -> tuple[list[Event], bool]:
        """Events to send now, and whether the stream is over after them."""
        plan = self.plan
        snapshot = self.bus.read(plan.session_id, self.cursor)
        out: list[Event] = []
        if self._check_gap and snapshot.gap is not None:
            data = {"turn_id": plan.turn_id, "after": self.cursor, "oldest": snapshot.oldest}
            out.append(make_event(snapshot.gap, "replay.gap", data))
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
        return self.bus.heartbeat()
