"""Live state of turns: events with replay, the active-turn registry, cancellation (SPEC 7, 7a).

`Live` is the one small value the HTTP layer and the turn runner use: an `EventLog`, a
`TurnBoard` (`live/interfaces.py`) and the count of each user's open streams (`live/limits.py`). By default both live in this process (`EventBus`,
`TurnRegistry`); with `REDIS_URL` both live in Redis (`live/redis_bus.py`,
`live/redis_turns.py`), shared by every server process, without touching the pipeline.
`TurnRunner` (`live/runner.py`) runs a turn on a worker and ends it with one terminal event.

This package sits between the HTTP layer and the pipeline: it may import the pipeline,
storage and `foundation/`, never `api/` or flask. What it returns or raises (`TurnDone`,
`TurnFailure` with a code, `TurnInProgress`) the HTTP layer maps to statuses and JSON
(`api/turns.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from live.interfaces import EventLog, TurnBoard
from live.limits import StreamSeats, StreamSlots

DEFAULT_STREAMS_PER_USER = 8  # MAX_STREAMS_PER_USER's default


@dataclass(frozen=True)
class Live:
    bus: EventLog
    turns: TurnBoard
    seats: StreamSeats = field(default_factory=lambda: StreamSlots(DEFAULT_STREAMS_PER_USER))  # open streams
    closers: tuple[Callable[[], None], ...] = ()  # what `close` releases (a Redis listener, its connections)
    recover: Callable[[str], object] | None = None  # shared turns: end a previous run's claims (`serve`)

    def serve_as(self, identity: str) -> None:
        """This process now serves requests as `identity` (`hostname:port`): with shared turns,
        the turns its previous run left claimed are ended at once instead of after their lease
        (`live/redis_turns.py`). Nothing to do in-process: those turns died with their process."""
        if self.recover is not None:
            self.recover(identity)

    def close(self) -> None:
        """Stop the backend's threads and connections (nothing to do in-process)."""
        for close in self.closers:
            close()
