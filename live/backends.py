"""Which backend holds the live state of turns: this process, or a Redis shared by several.

`build_live` is the one place that decides (from `REDIS_URL`); everything else uses the
`Live` value it returns through the `EventLog` / `TurnBoard` interfaces.
"""

from __future__ import annotations

from pathlib import Path

from live import DEFAULT_STREAMS_PER_USER, Live
from live.bus import EventBus
from live.ids import IdClock
from live.limits import RedisStreamSlots, StreamSlots
from live.redis_bus import RedisEventLog
from live.redis_conn import DEFAULT_PREFIX, RedisLink
from live.redis_turns import RedisTurnBoard
from live.turns import TurnRegistry


def build_live(
    *,
    data_dir: str,
    heartbeat_s: float,
    redis_url: str | None = None,
    lease_s: float = 30.0,
    prefix: str = DEFAULT_PREFIX,
    streams_per_user: int = DEFAULT_STREAMS_PER_USER,
) -> Live:
    """In-process (ids reserved in DATA_DIR/event-ids) without `redis_url`; else in Redis,
    with this process's one listener thread started (raises `RedisUnavailable` when Redis
    does not answer: a server configured to share state must not run alone)."""
    if not redis_url:
        here = EventBus(IdClock(Path(data_dir) / "event-ids"), heartbeat_s=heartbeat_s)
        return Live(bus=here, turns=TurnRegistry(), seats=StreamSlots(streams_per_user))
    link = RedisLink.connect(redis_url, prefix)
    bus = RedisEventLog(link, heartbeat_s=heartbeat_s)
    turns = RedisTurnBoard(link, bus, lease_s=lease_s)
    seats = RedisStreamSlots(link, streams_per_user, lease_s=lease_s)
    link.start()
    closers = (turns.close, seats.close, link.close)
    return Live(bus=bus, turns=turns, seats=seats, closers=closers, recover=turns.recover)
