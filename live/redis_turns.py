"""The board of running turns in Redis (REDIS_URL): one turn per session across processes.

A claim is a key per session set only when free (a Lua compare-and-set), holding the turn's
id, kind, start cursor and start time, with an expiry (`lease_s`) that the owning process
renews every third of it while the turn runs. A process killed mid-turn stops renewing, so
its session is free again at most `lease_s` after its last renewal.

A session is also free as soon as its running turn's terminal event is published: the
event log's publish script records the run of the latest `done`/`error` (`end_turn` in the
session's hash) in the same atomic step as the event itself, and a claim treats a key whose
turn has ended as free. So `finish` is atomic for `claim` as in-process: a client that
received `done` (from any process) can start the next turn at once. The key itself is then
deleted, if it is still this turn's.

Cancel from any process: the owner is this process (its `TurnLease` is local: set the token)
or another. Then a flag key (for the owner's next renewal, in case the message is lost) and
a pub/sub message (`<session> <turn>`, at once) reach the owner's listener thread, which sets
the local token; the turn ends as any stopped turn does (`done` with `stopped: true`).

A turn whose process died never publishes its end, so streams following it from other
processes would wait for ever. Every claim is also listed in one sorted set, scored by when
its lease runs out (renewals push it on). Each process's keeper thread (the one that renews)
looks there every third of a lease: a claim past its time whose key is gone and whose end
was never published is taken out (atomically: one process only) and ended with an `error`
event (`turn_lost`, status 503), so those streams end and their clients reload.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from live.redis_conn import RedisLink
from live.redis_outbox import Call
from live.turns import TurnInProgress, TurnLease, TurnOutcome

log = logging.getLogger("events.redis")

TURN_LEASE_S = 30.0
STOP_REASON = "stopped by the user"
REAP_BATCH = 100  # lost turns ended per look, at most
LOST_MESSAGE = "the server process running this turn stopped; what it stored before is kept, send the message again"

EndLostTurn = Callable[[str, str], object]  # (session id, turn id): publish its terminal event

# Deadlines are on Redis's clock (one clock for every host).
_NOW_MS = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

# KEYS: turn, meta, claims. ARGV: record json, lease ms, claims member
_CLAIM = (
    _NOW_MS
    + """
local current = redis.call('GET', KEYS[1])
if current then
  local running = cjson.decode(current)['turn_id']
  if redis.call('HGET', KEYS[2], 'end_turn') ~= running then return current end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[3], now_ms() + tonumber(ARGV[2]), ARGV[3])
return false
"""
)

# KEYS: claims. ARGV: batch, key prefix. Returns the members (`<session> <turn>`) of claims
# past their time whose key is gone and whose end was never published; removes them.
_REAP = (
    _NOW_MS
    + """
local lost = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[1]))
for _, member in ipairs(due) do
  local session, turn = string.match(member, '^(.*) (%S+)$')  -- a turn id has no space
  local current = redis.call('GET', ARGV[2] .. 'turn:{' .. session .. '}')
  local renewed = current and cjson.decode(current)['turn_id'] == turn
  if not renewed then
    redis.call('ZREM', KEYS[1], member)
    if redis.call('HGET', ARGV[2] .. 'meta:{' .. session .. '}', 'end_turn') ~= turn then
      table.insert(lost, member)
    end
  end
end
return lost
"""
)

# KEYS: turn, meta
_ACTIVE = """
local current = redis.call('GET', KEYS[1])
if current and redis.call('HGET', KEYS[2], 'end_turn') ~= cjson.decode(current)['turn_id'] then return current end
return false
"""

# KEYS: turn, claims. ARGV: turn id, claims member
_RELEASE = """
redis.call('ZREM', KEYS[2], ARGV[2])
local current = redis.call('GET', KEYS[1])
if current and cjson.decode(current)['turn_id'] == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
return 0
"""

# KEYS: turn, cancel flag, claims. ARGV: turn id, lease ms, claims member.
# Returns {still ours, cancel asked}
_RENEW = (
    _NOW_MS
    + """
local current = redis.call('GET', KEYS[1])
local ours = 0
if current and cjson.decode(current)['turn_id'] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[3], 'XX', now_ms() + tonumber(ARGV[2]), ARGV[3])
  ours = 1
end
return {ours, redis.call('EXISTS', KEYS[2])}
"""
)


@dataclass(frozen=True)
class RemoteTurn:
    """A running turn as recorded in Redis (maybe run by another process)."""

    session_id: str
    turn_id: str
    kind: str
    start_cursor: int
    started_at: str


def _record(lease: TurnLease) -> str:
    return json.dumps(
        {
            "session_id": lease.session_id,
            "turn_id": lease.turn_id,
            "kind": lease.kind,
            "start_cursor": lease.start_cursor,
            "started_at": lease.started_at,
        }
    )


class RedisTurnBoard:
    """`TurnBoard` over Redis; thread-safe; one per app process, sharing its `RedisLink`.

    Leases claimed here are kept locally too (their cancel token and outcome future live
    here). One keeper thread per process renews their keys, picks up cancel flags, and ends
    the turns of processes that died (`end_lost_turn`, e.g. publishing an `error` event)."""

    def __init__(self, link: RedisLink, end_lost_turn: EndLostTurn, *, lease_s: float = TURN_LEASE_S) -> None:
        self.link = link
        self.keys = link.keys
        self.end_lost_turn = end_lost_turn
        self.lease_ms = int(lease_s * 1000)
        self.keep_every_s = lease_s / 3
        client = link.client
        self._claim = client.register_script(_CLAIM)
        self._active = client.register_script(_ACTIVE)
        self._release = client.register_script(_RELEASE)
        self._renew = client.register_script(_RENEW)
        self._reap = client.register_script(_REAP)
        self._lock = threading.Lock()
        self._local: dict[str, TurnLease] = {}
        self._stop = threading.Event()
        self._keeper = threading.Thread(target=self._keep_loop, name="turn-lease-keeper", daemon=True)
        link.subscribe(self.keys.cancel_channel, self._on_cancel, self._renew_all)
        self._keeper.start()

    # ------------------------------------------------------------------ the interface

    def claim(self, session_id: str, kind: str, start_cursor: int) -> TurnLease:
        lease = TurnLease(session_id=session_id, kind=kind, start_cursor=start_cursor)
        keys = self.keys
        running = self._claim(
            keys=[keys.turn(session_id), keys.meta(session_id), keys.claims],
            args=[_record(lease), self.lease_ms, _member(lease)],
        )
        if running:
            raise TurnInProgress(json.loads(running)["turn_id"])
        with self._lock:
            self._local[session_id] = lease
        return lease

    def active(self, session_id: str) -> TurnLease | RemoteTurn | None:
        raw = self._active(keys=[self.keys.turn(session_id), self.keys.meta(session_id)])
        if not raw:
            return None
        turn = RemoteTurn(**json.loads(raw))
        with self._lock:
            local = self._local.get(session_id)
        return local if local is not None and local.turn_id == turn.turn_id else turn

    def cancel(self, session_id: str, turn_id: str | None = None) -> str | None:
        running = self.active(session_id)
        if running is None or (turn_id is not None and running.turn_id != turn_id):
            return None
        if isinstance(running, TurnLease):
            running.token.cancel(STOP_REASON)
            return running.turn_id
        client = self.link.client
        client.set(self.keys.cancel_flag(running.turn_id), "1", px=self.lease_ms)
        client.publish(self.keys.cancel_channel, f"{session_id} {running.turn_id}")
        return running.turn_id

    def finish(self, lease: TurnLease, publish_end: Callable[[], object], outcome: TurnOutcome) -> None:
        try:
            try:
                publish_end()  # frees the session for `claim` in the same step (see the module doc)
            finally:
                # Tidying only, once the end is published: the turn does not wait for it.
                self.link.outbox.post(self._forget(lease))
        finally:
            lease.outcome.set_result(outcome)

    def abandon(self, lease: TurnLease) -> None:
        if not lease.started:
            release = self._forget(lease)  # no end was published: the key itself frees the session now
            release.script(keys=release.keys, args=release.args)
            if not lease.outcome.done():
                lease.outcome.cancel()

    # ------------------------------------------------------------------ local leases

    def _forget(self, lease: TurnLease) -> Call:
        """Drop the local lease; the call that deletes its claim in Redis (if still its own)."""
        with self._lock:
            if self._local.get(lease.session_id) is lease:
                del self._local[lease.session_id]
        return Call(
            self._release,
            keys=[self.keys.turn(lease.session_id), self.keys.claims],
            args=[lease.turn_id, _member(lease)],
        )

    def _on_cancel(self, message: str) -> None:
        session_id, _, turn_id = message.rpartition(" ")  # a turn id has no space
        with self._lock:
            lease = self._local.get(session_id)
        if lease is not None and lease.turn_id == turn_id:
            lease.token.cancel(STOP_REASON)

    def _keep_loop(self) -> None:
        while not self._stop.wait(self.keep_every_s):
            try:
                self._renew_all()
                self._end_lost_turns()
            except Exception:  # Redis away for a moment: try again next time
                log.exception("keeping the turn leases failed")

    def _renew_all(self) -> None:
        """Extend every local lease; stop a turn whose cancel flag is set (a lost message)."""
        with self._lock:
            leases = list(self._local.values())
        for lease in leases:
            ours, asked = self._renew(
                keys=[self.keys.turn(lease.session_id), self.keys.cancel_flag(lease.turn_id), self.keys.claims],
                args=[lease.turn_id, self.lease_ms, _member(lease)],
            )
            if asked:
                lease.token.cancel(STOP_REASON)
            if not ours and not lease.outcome.done():
                log.warning("turn %s lost its claim on session %s (expired)", lease.turn_id, lease.session_id)

    def _end_lost_turns(self) -> None:
        """End the turns whose process died (claimed by this call alone, atomically)."""
        lost = self._reap(keys=[self.keys.claims], args=[REAP_BATCH, self.keys.prefix])
        for member in lost:
            session_id, _, turn_id = str(member).rpartition(" ")
            log.warning("turn %s of session %s lost its process; ending it", turn_id, session_id)
            self.end_lost_turn(session_id, turn_id)

    def close(self) -> None:
        self._stop.set()
        self._keeper.join(5)


def _member(lease: TurnLease) -> str:
    return f"{lease.session_id} {lease.turn_id}"


def lost_turn_error(session_id: str, turn_id: str) -> dict[str, object]:
    """The data of the `error` event that ends a turn whose process died (as a failed turn
    ends, `api/turns.py`'s `error_event`: the error body and the HTTP status)."""
    return {
        "turn_id": turn_id,
        "session_id": session_id,
        "error": {"code": "turn_lost", "message": LOST_MESSAGE},
        "status": 503,
    }
