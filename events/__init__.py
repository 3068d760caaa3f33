"""Live state of turns: events with replay, the active-turn registry, cancellation (SPEC 7, 7a).

`Live` is the one small interface the HTTP layer and the turn runner use. Today both parts
live in this process (`EventBus`, `TurnRegistry`); a shared backend (Redis) can implement
the same methods without touching the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass

from events.bus import EventBus
from events.turns import TurnRegistry


@dataclass(frozen=True)
class Live:
    bus: EventBus
    turns: TurnRegistry
