"""The board of running turns in Redis (REDIS_URL): one turn per session across processes.

A claim is a key per session set only when free (a Lua compare-and-set), holding the turn's
id, kind, start cursor, start time and owner, with an expiry (`lease_s`) that the owning
process renews every third of it while the turn runs. The session's hash of the event log
also names the claimed turn (`claimed`), without expiry: a claim is known even once its key
has expired.

A session is free as soon as its running turn's terminal event is published: the event log's
publish script records the run of the latest `done`/`error` (`end_turn` in the session's
hash) in the same atomic step as the event itself, and a claim treats a key whose turn has
ended as free. So `finish` is atomic for `claim` as in-process: a client that received
`done` (from any process) can start the next turn at once. The key itself is then deleted,
if it is still this turn's.

A turn whose process died never publishes its end. Its claim is ended (an `error` event,
`turn_lost`, status 503, published with the event log's own Lua function `PUBLISH_LUA`) by
the first script that looks at the session after its key expired: `claim`, `active`, or the
keepers' sweep. The end is published in the same atomic step as that script's own work, so
no other turn can claim the session, nor any event of another turn reach its log, before the
lost turn's end: a stream following the lost turn ends with its `error`, never with the next
turn's events. Every claim is also listed in one sorted set, scored by when its lease runs
out (renewals push it on); each process's keeper thread (the one that renews) looks there
every third of a lease and ends the lost claims nobody looked at, so their streams end too.

A restarted process need not wait for its dead turns' leases. When a process starts serving
(`recover`), it takes an owner identity, its host name and port (`hostname:port`): two live
servers can never hold one port of one host, so a claim with this identity and an older
incarnation is a turn of this same server that died with its previous process. Every claim
it makes carries the identity, and `recover` ends (atomically, as above) every claim already
carrying it, before the server accepts a request. Processes that never serve (the command
line, tests) claim with no owner and recover nothing. Other owners' claims still wait for
their lease: only the owner itself knows it is dead without a clock.

A turn whose own claim is gone when its process renews it (the process stalled past its lease,
or Redis lost its data) is stopped there: its session may already run another turn.

Cancel from any process: the owner is this process (its `TurnLease` is local: set the token)
or another. Then a flag key (for the owner's next renewal, in case the message is lost) and
a pub/sub message (`<session> <turn>`, at once) reach the owner's listener thread, which sets
the local token; the turn ends as any stopped turn does (`done` with `stopped: true`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields

from live.redis_bus import CLOCK_LUA, PUBLISH_LUA, RedisEventLog
from live.redis_conn import RedisLink
from live.redis_outbox import Call
from live.turns import UNSTARTED_GRACE_S, TurnInProgress, TurnLease, TurnOutcome

log = logging.getLogger("events.redis")

TURN_LEASE_S = 30.0
STOP_REASON = "stopped by the user"
LOST_CLAIM_REASON = "its claim on the session expired"
REAP_BATCH = 100  # lost turns ended per look, at most
LOST_MESSAGE = "the server process running this turn stopped; what it stored before is kept, send the message again"

# Every script below starts with the event log's functions and `settle`. ARGV[1..5]: the event
# log's settings (`RedisEventLog.publish_settings`), ARGV[6]: the lost turn's message; a script's
# own arguments follow. Key names are spelt as `RedisKeys` spells them.
_SETTLE = (
    CLOCK_LUA
    + PUBLISH_LUA
    + """
local log = log_of(ARGV, 1)
local prefix, lost_message = log.prefix, ARGV[6]
local claims = prefix .. 'claims'
local function turn_key(session) return prefix .. 'turn:{' .. session .. '}' end
local function meta_key(session) return prefix .. 'meta:{' .. session .. '}' end

-- end a claimed turn with its `error` (turn_lost), as if its process had published it
local function end_lost(session, turn)
  local data = cjson.encode({turn_id = turn, session_id = session, status = 503,
                             error = {code = 'turn_lost', message = lost_message}})
  local t = redis.call('TIME')
  local at = t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
  publish(log, session, 'error', data, at, '1', turn)
  redis.call('HDEL', meta_key(session), 'claimed')
  redis.call('ZREM', claims, session .. ' ' .. turn)
end

-- the session's claimed turn, if its key expired without its end published, is ended now;
-- returns the id of the turn so ended (false when none)
local function settle(session)
  local meta = meta_key(session)
  local claimed = redis.call('HGET', meta, 'claimed')
  if not claimed then return false end
  if redis.call('HGET', meta, 'end_turn') == claimed then
    redis.call('HDEL', meta, 'claimed')
    return false
  end
  if redis.call('EXISTS', turn_key(session)) == 1 then return false end
  end_lost(session, claimed)
  return claimed
end
"""
)

# ARGV[7..]: session, record json, lease ms, claims member, turn id
_CLAIM = (
    _SETTLE
    + """
local session = ARGV[7]
settle(session)
local current = redis.call('GET', turn_key(session))
if current then
  local running = cjson.decode(current)['turn_id']
  if redis.call('HGET', meta_key(session), 'end_turn') ~= running then return current end
end
redis.call('SET', turn_key(session), ARGV[8], 'PX', ARGV[9])
redis.call('HSET', meta_key(session), 'claimed', ARGV[11])
redis.call('ZADD', claims, now_us() / 1000 + tonumber(ARGV[9]), ARGV[10])
return false
"""
)

# ARGV[7]: batch. Ends the claims past their time whose key is gone and whose end was never
# published; returns their members (`<session> <turn>`).
_REAP = (
    _SETTLE
    + """
local lost = {}
local due = redis.call('ZRANGEBYSCORE', claims, '-inf', now_us() / 1000, 'LIMIT', 0, tonumber(ARGV[7]))
for _, member in ipairs(due) do
  local session, turn = string.match(member, '^(.*) (%S+)$')  -- a turn id has no space
  local current = redis.call('GET', turn_key(session))
  if not (current and cjson.decode(current)['turn_id'] == turn) then
    redis.call('ZREM', claims, member)
    if settle(session) == turn then table.insert(lost, member) end
  end
end
return lost
"""
)

# ARGV[7]: owner. Ends every claim this owner made (a previous incarnation of this server).
_RECOVER = (
    _SETTLE
    + """
local ended = {}
for _, member in ipairs(redis.call('ZRANGE', claims, 0, -1)) do
  local session, turn = string.match(member, '^(.*) (%S+)$')
  local current = redis.call('GET', turn_key(session))
  local record = current and cjson.decode(current)
  if record and record['turn_id'] == turn and record['owner'] == ARGV[7] then
    redis.call('DEL', turn_key(session))
    if settle(session) == turn then table.insert(ended, member) end
  end
end
return ended
"""
)

# ARGV[7]: session
_ACTIVE = (
    _SETTLE
    + """
local session = ARGV[7]
settle(session)
local current = redis.call('GET', turn_key(session))
if current and redis.call('HGET', meta_key(session), 'end_turn') ~= cjson.decode(current)['turn_id'] then
  return current
end
return false
"""
)

# KEYS: turn, claims, meta. ARGV: turn id, claims member
_RELEASE = """
redis.call('ZREM', KEYS[2], ARGV[2])
if redis.call('HGET', KEYS[3], 'claimed') == ARGV[1] then redis.call('HDEL', KEYS[3], 'claimed') end
local current = redis.call('GET', KEYS[1])
if current and cjson.decode(current)['turn_id'] == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
return 0
"""

# KEYS: turn, cancel flag, claims. ARGV: turn id, lease ms, claims member.
# Returns {still ours, cancel asked}
_RENEW = (
    CLOCK_LUA
    + """
local current = redis.call('GET', KEYS[1])
local ours = 0
if current and cjson.decode(current)['turn_id'] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[3], 'XX', now_us() / 1000 + tonumber(ARGV[2]), ARGV[3])
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

    @classmethod
    def of(cls, raw: str) -> RemoteTurn:
        record = json.loads(raw)
        return cls(**{field.name: record[field.name] for field in fields(cls)})


def _record(lease: TurnLease, owner: str) -> str:
    return json.dumps(
        {
            "session_id": lease.session_id,
            "turn_id": lease.turn_id,
            "kind": lease.kind,
            "start_cursor": lease.start_cursor,
            "started_at": lease.started_at,
            "owner": owner,
        }
    )


class RedisTurnBoard:
    """`TurnBoard` over Redis; thread-safe; one per app process, sharing its `RedisLink`.

    Leases claimed here are kept locally too (their cancel token and outcome future live
    here). One keeper thread per process renews their keys, picks up cancel flags, and ends
    the turns of processes that died (an `error` event on `events`, the shared log)."""

    def __init__(self, link: RedisLink, events: RedisEventLog, *, lease_s: float = TURN_LEASE_S) -> None:
        self.link = link
        self.keys = link.keys
        self.events = events
        self.lease_ms = int(lease_s * 1000)
        self.keep_every_s = lease_s / 3
        self.owner = ""  # this server's identity once it serves (`recover`); none before
        client = link.client
        self._claim = client.register_script(_CLAIM)
        self._active = client.register_script(_ACTIVE)
        self._release = client.register_script(_RELEASE)
        self._renew = client.register_script(_RENEW)
        self._reap = client.register_script(_REAP)
        self._recover = client.register_script(_RECOVER)
        self._lock = threading.Lock()
        self._local: dict[str, TurnLease] = {}
        self._stop = threading.Event()
        self._keeper = threading.Thread(target=self._keep_loop, name="turn-lease-keeper", daemon=True)
        link.subscribe(self.keys.cancel_channel, self._on_cancel, self._renew_all)
        self._keeper.start()

    def _args(self, *own: str | int) -> list[str | int]:
        """The common arguments of the scripts that may end a lost turn (see `_SETTLE`), then `own`."""
        return [*self.events.publish_settings(), LOST_MESSAGE, *own]

    # ------------------------------------------------------------------ the interface

    def claim(self, session_id: str, kind: str, start_cursor: int) -> TurnLease:
        lease = TurnLease(session_id=session_id, kind=kind, start_cursor=start_cursor)
        running = self._claim(
            keys=[],
            args=self._args(session_id, _record(lease, self.owner), self.lease_ms, _member(lease), lease.turn_id),
        )
        if running:
            raise TurnInProgress(json.loads(running)["turn_id"])
        with self._lock:
            self._local[session_id] = lease
        return lease

    def active(self, session_id: str) -> TurnLease | RemoteTurn | None:
        raw = self._active(keys=[], args=self._args(session_id))
        if not raw:
            return None
        turn = RemoteTurn.of(raw)
        with self._lock:
            local = self._local.get(session_id)
        return local if local is not None and local.turn_id == turn.turn_id else turn

    def recover(self, owner: str) -> list[str]:
        """Serve as `owner` (this server's `hostname:port`) from now on, and end the turns a
        previous incarnation of it left claimed (it died: a port has one server); the
        members (`<session> <turn>`) ended."""
        self.owner = owner
        ended = [str(member) for member in self._recover(keys=[], args=self._args(owner))]
        for member in ended:
            log.warning("turn %s was left by a previous run of this server (%s); ended it", member, owner)
        return ended

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
            keys=[self.keys.turn(lease.session_id), self.keys.claims, self.keys.meta(lease.session_id)],
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
        """Extend every started local lease; stop a turn whose cancel flag is set (a lost
        message). A claim whose turn never started is not renewed: past `UNSTARTED_GRACE_S` it
        is given back (its key would otherwise keep the session claimed for as long as this
        process lives)."""
        with self._lock:
            leases = list(self._local.values())
        for lease in leases:
            if not lease.started:
                if lease.unstarted_for(UNSTARTED_GRACE_S):
                    log.warning(
                        "turn %s claimed session %s and never started; released", lease.turn_id, lease.session_id
                    )
                    self.abandon(lease)
                continue
            ours, asked = self._renew(
                keys=[self.keys.turn(lease.session_id), self.keys.cancel_flag(lease.turn_id), self.keys.claims],
                args=[lease.turn_id, self.lease_ms, _member(lease)],
            )
            if asked:
                lease.token.cancel(STOP_REASON)
            if not ours and not lease.outcome.done():
                # its claim expired (this process was stalled): it may have been ended as lost
                # and the session claimed again, so it stops rather than write over the next turn
                log.warning("turn %s lost its claim on session %s (expired)", lease.turn_id, lease.session_id)
                lease.token.cancel(LOST_CLAIM_REASON)

    def _end_lost_turns(self) -> None:
        """End the turns whose process died (each by one script run alone, atomically)."""
        for member in self._reap(keys=[], args=self._args(REAP_BATCH)):
            log.warning("turn %s lost its process; ended it", member)

    def close(self) -> None:
        self._stop.set()
        self._keeper.join(5)


def _member(lease: TurnLease) -> str:
    return f"{lease.session_id} {lease.turn_id}"
