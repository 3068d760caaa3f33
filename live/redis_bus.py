"""The event log in Redis (REDIS_URL): every server process publishes to and replays from it.

Layout (names in `live.redis_conn.RedisKeys`): one Redis Stream per session whose entry ids
ARE the event ids (`<id>-0`), so `XRANGE` from `after + 1` is exactly the replay after a
client's `Last-Event-ID`; one small hash per session (`last` id, `floor`: the newest id
trimmed away, `end`: the latest terminal event, `end_turn`: its run); one counter of ids.

Ids: one Lua script allocates the id and appends the event atomically, so ids increase
across every process and host. An id is `max(counter + 1, Redis clock in microseconds)`, as
`live.ids.IdClock` does in-process: a Redis restarted without its data starts above every
id it issued before (the clock moved on), and the `epoch` it records then tells a client
holding an older `Last-Event-ID` that events may be missing (`replay.gap`).

Bounded replay, in entries and in bytes, as `EventBus` bounds it (the same budgets, per
session and in total: `SESSION_BUDGET_BYTES`, `TOTAL_BUDGET_BYTES`): each stream keeps at
most `max_events` entries and `session_budget_bytes` (an entry counts its three fields plus
what Redis adds to them, `ENTRY_OVERHEAD_BYTES`; the latest end counts too); the script
trims the oldest and records the newest id trimmed in `floor`, so a cursor before it gets
`replay.gap`. Every session's count is kept in one hash (`sizes`) and their sum in one counter
(`bytes`); one sorted set (`recent`) orders sessions by their last publish. When the sum
passes `total_budget_bytes`, the least recently active sessions lose their events (and their
kept end) until it fits, their `floor` set to their newest id, as `EventBus` drops its least
recently used channels. A session untouched for `idle_ttl_s` expires; its count is dropped
when it publishes again or when the total budget reaches it. The latest terminal event stays
in the hash even when its entry is trimmed, as in `EventBus`.
Consecutive `answer.delta` entries of one turn and pass are replayed as one delta, as
`EventBus` does. While a turn runs, each delta is an entry (a stream cannot change an entry);
its terminal event compacts them (`compact`, in the same script): one entry per pass holding
the text after the turn's last `answer.reset`, with each piece's id and where its text ends,
and the turn's tail written anew in its order (moved entries keep their original id), so a
reader from any id, a live follower a few pieces behind included, still gets exactly what it
has not seen, in the order it was published. A
stream keeps the room of deleted entries while others share their node, so that room stays
counted until the session's stream is rewritten (once it is a third of the session).

Waking: publishing also sends `<id> <session>` on one pub/sub channel. The process's single
listener thread (`RedisLink`) receives it and wakes the local waiters of that session: a
thread waiting in `wait`, or an asyncio stream's `Wakeup` (through its loop, once per loop),
so an idle stream costs no thread here either.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from foundation.events import TERMINAL_EVENTS, EventName
from live.bus import (
    DELTA,
    HEARTBEAT_S,
    SESSION_BUDGET_BYTES,
    TOTAL_BUDGET_BYTES,
    Event,
    Snapshot,
    Wakeup,
    checked_payload,
    make_event,
)
from live.redis_conn import RedisLink, answering
from live.redis_outbox import Call

MAX_EVENTS_PER_SESSION = 4096  # entries kept per session (one answer's deltas are one entry each)
ENTRY_OVERHEAD_BYTES = 64  # what Redis adds to an entry's three fields in a stream, roughly (bench/README.md)
IDLE_SESSION_TTL_S = 24 * 3600.0
SEEN_SESSIONS = 100_000  # sessions whose newest id the listener remembers (about 10 MB at most)
MAX_ID = 2**62  # a client's cursor beyond any real id is clamped (stream ids are 64-bit)

CLOCK_LUA = """
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function current(counter, epoch)
  local value = redis.call('GET', counter)
  if value then return tonumber(value) end
  local start = now_us() - 1
  redis.call('SET', counter, string.format('%.0f', start))
  redis.call('SET', epoch, string.format('%.0f', start))
  return start
end
local function next_id(counter, epoch)
  local id = math.max(current(counter, epoch) + 1, now_us())
  local text = string.format('%.0f', id)
  redis.call('SET', counter, text)
  return text
end
"""

# One event appended to a session: its id, the end of a run (`end`, `end_turn`), the budgets
# (entries and bytes per session, bytes in total: see the module doc), the expiry and the
# wake-up. Functions, so that the turn board's scripts end a lost turn in the same atomic step
# as their own work. `log` is the log's settings, read by `log_of` from five arguments
# (`RedisEventLog.publish_settings`); key names are spelt as `RedisKeys` spells them.
PUBLISH_LUA = (
    f"local ENTRY_OVERHEAD = {ENTRY_OVERHEAD_BYTES}\n"
    + """
local function log_of(args, first)
  local prefix = args[first]
  return {prefix = prefix, keep = tonumber(args[first + 1]), ttl = args[first + 2],
          budget = tonumber(args[first + 3]), total = tonumber(args[first + 4]),
          counter = prefix .. 'ids', epoch = prefix .. 'ids:epoch', wake = prefix .. 'wake',
          bytes = prefix .. 'bytes', sizes = prefix .. 'sizes', recent = prefix .. 'recent'}
end
local function stream_of(log, session) return log.prefix .. 'ev:{' .. session .. '}' end
local function meta_of(log, session) return log.prefix .. 'meta:{' .. session .. '}' end
local function number_of(stream_id) return string.sub(stream_id, 1, string.find(stream_id, '-', 1, true) - 1) end

local function entry_bytes(fields)
  local size = ENTRY_OVERHEAD
  for index = 2, #fields, 2 do size = size + #fields[index] end
  return size
end

-- drop the oldest entries while `over(bytes, entries)`; the bytes dropped
local function drop_oldest(stream, meta, bytes, length, over)
  local dropped, newest = 0, nil
  while length > 0 and over(bytes - dropped, length) do
    for _, entry in ipairs(redis.call('XRANGE', stream, '-', '+', 'COUNT', 64)) do
      if not over(bytes - dropped, length) then break end
      dropped = dropped + entry_bytes(entry[2])
      length = length - 1
      newest = entry[1]
    end
    if newest == nil then break end
    redis.call('XTRIM', stream, 'MINID', number_of(newest) .. '-1')
  end
  if newest then redis.call('HSET', meta, 'floor', number_of(newest)) end
  return dropped
end

-- over the total budget: the least recently active sessions other than `current` lose their
-- events (their ends too; `floor` records the hole) until the total fits again
local function evict(log, current, total)
  while total > log.total do
    local freed = false
    for _, other in ipairs(redis.call('ZRANGE', log.recent, 0, 15)) do
      if total <= log.total then break end
      if other ~= current then
        local size = tonumber(redis.call('HGET', log.sizes, other) or '0')
        local meta = meta_of(log, other)
        if redis.call('EXISTS', meta) == 1 then
          local last = redis.call('HGET', meta, 'last')
          if last then redis.call('HSET', meta, 'floor', last) end
          redis.call('HDEL', meta, 'end', 'end_bytes')
        end
        redis.call('DEL', stream_of(log, other))
        redis.call('HDEL', log.sizes, other)
        redis.call('ZREM', log.recent, other)
        total = redis.call('DECRBY', log.bytes, size)
        freed = true
      end
    end
    if not freed then return end  -- only `current` is left
  end
end

-- the stream written anew, entry by entry (a stream keeps the room of deleted entries while
-- others share their node); its exact bytes, the kept end included
local function rewrite(stream, meta)
  local copy, bytes = stream .. ':copy', tonumber(redis.call('HGET', meta, 'end_bytes') or '0')
  redis.call('DEL', copy)  -- the same hash tag as `stream`: the same slot
  for _, entry in ipairs(redis.call('XRANGE', stream, '-', '+')) do
    redis.call('XADD', copy, entry[1], unpack(entry[2]))
    bytes = bytes + entry_bytes(entry[2])
  end
  if redis.call('EXISTS', copy) == 1 then redis.call('RENAME', copy, stream) end
  redis.call('HDEL', meta, 'waste')
  return bytes
end

-- a finished turn's `answer.delta` entries become one per pass (the text after the turn's last
-- `answer.reset`), `p` listing each piece's id (as the difference from the previous one) and
-- where its text ends (in bytes). The turn's tail from its first delta is written anew in its
-- order: each pass's text where its first piece was, every other entry after it as it was,
-- with `o` its original id, so a reader from any id gets what it has not seen, in the order it
-- was published (`_entry` skips a moved entry it had). The old entries' room stays counted
-- (`waste`) until the stream is rewritten, once it is a third of the session's bytes, so
-- each byte is copied a bounded number of times. The session's bytes after it.
local function compact(log, stream, meta, turn, bytes)
  if turn == '' or redis.call('HGET', meta, 'dturn') ~= turn then return bytes end
  local first = redis.call('HGET', meta, 'dfirst')
  redis.call('HDEL', meta, 'dturn', 'dfirst')
  local freed, old, pieces, runs, out = 0, {}, 0, {}, {}
  for _, entry in ipairs(redis.call('XRANGE', stream, first, '+')) do
    local fields = entry[2]
    table.insert(old, entry[1])
    freed = freed + entry_bytes(fields)
    local data = nil
    if fields[2] == 'answer.delta' or fields[2] == 'answer.reset' then data = cjson.decode(fields[4]) end
    if data ~= nil and data['turn_id'] == turn and fields[2] == 'answer.delta' then
      pieces = pieces + 1
      local run = runs[#runs]
      if run == nil or run.pass ~= data['pass'] then
        run = {pass = data['pass'], texts = {}, index = {}, length = 0, last = 0}
        table.insert(runs, run)
        table.insert(out, run)
      end
      local number = tonumber(number_of(entry[1]))
      table.insert(run.texts, data['text'])
      run.length = run.length + #data['text']
      table.insert(run.index, string.format('%.0f', number - run.last) .. ':' .. run.length)
      run.last, run.at = number, fields[6]
    else
      if data ~= nil and data['turn_id'] == turn then  -- a reset: the text before it is dropped
        for _, run in ipairs(runs) do run.dropped = true end
        runs = {}
      end
      local moved = {unpack(fields, 1, 6)}
      table.insert(moved, 'o')
      table.insert(moved, number_of(entry[1]))
      table.insert(out, moved)
    end
  end
  if pieces < 2 then return bytes end
  for start = 1, #old, 1000 do
    redis.call('XDEL', stream, unpack(old, start, math.min(start + 999, #old)))
  end
  for _, item in ipairs(out) do
    local fields = item
    if item.texts ~= nil then
      fields = nil
      if not item.dropped then
        local data = cjson.encode({turn_id = turn, pass = item.pass, text = table.concat(item.texts)})
        fields = {'n', 'answer.delta', 'd', data, 't', item.at, 'p', table.concat(item.index, ',')}
      end
    end
    if fields ~= nil then
      redis.call('XADD', stream, next_id(log.counter, log.epoch) .. '-0', unpack(fields))
      bytes = bytes + entry_bytes(fields)
    end
  end
  local waste = tonumber(redis.call('HGET', meta, 'waste') or '0') + freed
  if waste * 3 > bytes then return rewrite(stream, meta) end
  redis.call('HSET', meta, 'waste', waste)
  return bytes
end

local function publish(log, session, name, data, at, terminal, turn)
  local stream, meta = stream_of(log, session), meta_of(log, session)
  local before = tonumber(redis.call('HGET', log.sizes, session) or '0')
  local bytes = before
  if redis.call('EXISTS', stream) == 0 then  -- expired (idle): what was counted is gone
    bytes = tonumber(redis.call('HGET', meta, 'end_bytes') or '0')
    redis.call('HDEL', meta, 'waste')
  end
  if terminal == '1' then bytes = compact(log, stream, meta, turn, bytes) end
  local id = next_id(log.counter, log.epoch)
  if name == 'answer.delta' and redis.call('HGET', meta, 'dturn') ~= turn then
    redis.call('HSET', meta, 'dturn', turn, 'dfirst', id .. '-0')  -- where `compact` will look
  end
  redis.call('XADD', stream, id .. '-0', 'n', name, 'd', data, 't', at)
  bytes = bytes + #name + #data + #at + ENTRY_OVERHEAD
  redis.call('HSET', meta, 'last', id)
  if terminal == '1' then
    local ending = cjson.encode({id, name, data, at})
    bytes = bytes + #ending - tonumber(redis.call('HGET', meta, 'end_bytes') or '0')
    redis.call('HSET', meta, 'end', ending, 'end_turn', turn, 'end_bytes', #ending)
  end
  local keep, budget = log.keep, log.budget
  if bytes > budget and redis.call('HEXISTS', meta, 'waste') == 1 then bytes = rewrite(stream, meta) end
  bytes = bytes - drop_oldest(stream, meta, bytes, redis.call('XLEN', stream), function(b, n)
    return n > keep or (n > 1 and b > budget)
  end)
  redis.call('HSET', log.sizes, session, bytes)
  redis.call('ZADD', log.recent, now_us(), session)
  local total = redis.call('INCRBY', log.bytes, bytes - before)
  if total > log.total then evict(log, session, total) end
  redis.call('PEXPIRE', stream, log.ttl)
  redis.call('PEXPIRE', meta, log.ttl)
  redis.call('PUBLISH', log.wake, id .. ' ' .. session)
  return id
end
"""
)

# ARGV: the log's settings (5), then name, data json, at, terminal (1/0), turn id, session id
_PUBLISH = (
    CLOCK_LUA
    + PUBLISH_LUA
    + "return publish(log_of(ARGV, 1), ARGV[11], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10])\n"
)

# KEYS: counter, epoch
_NEXT_ID = CLOCK_LUA + "return next_id(KEYS[1], KEYS[2])\n"
_POSITION = CLOCK_LUA + "return string.format('%.0f', current(KEYS[1], KEYS[2]))\n"

# KEYS: stream, meta, epoch. ARGV: first stream id to return
_READ = """
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+')
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
local oldest = false
if #first > 0 then oldest = first[1][1] end
local meta = redis.call('HMGET', KEYS[2], 'floor', 'end')
return {entries, oldest, meta[1], meta[2], redis.call('GET', KEYS[3])}
"""


def _event_id(stream_id: str) -> int:
    return int(stream_id.partition("-")[0])


def _event(event_id: int, name: str, data_json: str, at: str) -> Event:
    return Event(event_id, name, json.loads(data_json), float(at), data_json)


def _entry(stream_id: str, fields: list[str], after: int) -> Event | None:
    """One stream entry as the event a reader after `after` gets: a finished turn's compacted
    deltas (with `p`, see `compact`) hold only the text of the pieces after `after`, and an
    entry `compact` moved (with `o`, its original id) is skipped by a reader that had it (None:
    nothing left for this reader)."""
    event_id = _event_id(stream_id)
    if len(fields) < 8:
        return _event(event_id, fields[1], fields[3], fields[5])
    if fields[6] == "o":
        return None if int(fields[7]) <= after else _event(event_id, fields[1], fields[3], fields[5])
    data = json.loads(fields[3])
    piece, start = 0, 0
    for step in fields[7].split(","):
        gap, _, end = step.partition(":")
        piece += int(gap)
        if piece > after:
            break
        start = int(end)
    else:
        return None  # the reader has every piece already
    text = data["text"].encode("utf-8", "surrogatepass")[start:].decode("utf-8", "surrogatepass")
    return make_event(event_id, DELTA, {**data, "text": text}, float(fields[5]))


def _end(raw: str | None) -> Event | None:
    if not raw:
        return None
    event_id, name, data_json, at = json.loads(raw)
    return _event(int(event_id), name, data_json, at)


def merge_deltas(events: list[Event]) -> list[Event]:
    """Consecutive deltas of one turn and pass as one delta (its id the last piece's)."""
    out: list[Event] = []
    for event in events:
        last = out[-1] if out else None
        if (
            event.name == DELTA
            and last is not None
            and last.name == DELTA
            and last.data["turn_id"] == event.data["turn_id"]
            and last.data["pass"] == event.data["pass"]
        ):
            data = {**last.data, "text": last.data["text"] + event.data["text"]}
            out[-1] = make_event(event.id, DELTA, data, event.at)
        else:
            out.append(event)
    return out


@dataclass(eq=False)
class _Watch:
    """The local waiters of one session (only while someone waits)."""

    condition: threading.Condition
    seen: int = 0  # the newest id this process knows was published on the session
    alarms: int = 0  # times the listener lost Redis (a waiting thread then looks again)
    waiters: set[Wakeup] = field(default_factory=set)
    sync_waiting: int = 0


class RedisEventLog:
    """`EventLog` over Redis; thread-safe; one per app process, sharing the process's `RedisLink`."""

    def __init__(
        self,
        link: RedisLink,
        *,
        heartbeat_s: float = HEARTBEAT_S,
        max_events: int = MAX_EVENTS_PER_SESSION,
        idle_ttl_s: float = IDLE_SESSION_TTL_S,
        session_budget_bytes: int = SESSION_BUDGET_BYTES,
        total_budget_bytes: int = TOTAL_BUDGET_BYTES,
    ) -> None:
        if max_events < 2:
            raise ValueError("keep at least 2 events per session")
        self.session_budget = session_budget_bytes
        self.total_budget = total_budget_bytes
        self.link = link
        self.keys = link.keys
        self.heartbeat_s = heartbeat_s
        self.max_events = max_events
        self.ttl_ms = int(idle_ttl_s * 1000)
        client = link.client
        self._publish = client.register_script(_PUBLISH)
        self._next_id = client.register_script(_NEXT_ID)
        self._position = client.register_script(_POSITION)
        self._read = client.register_script(_READ)
        self._lock = threading.Lock()
        self._watches: dict[str, _Watch] = {}
        self._seen: OrderedDict[str, int] = OrderedDict()  # newest id heard of, per session (least recent first)
        link.subscribe(self.keys.wake_channel, self._on_wake, self._resync, self._wake_all)

    # ------------------------------------------------------------------ publishing

    def publish(self, session_id: str, name: EventName, data: dict[str, Any] | None = None) -> Event:
        """Store one event now, after everything `post`ed before it, and return it with its id.
        It rides in the outbox's next batch, so a turn's end costs one round trip however many
        of its deltas were still on their way."""
        call, payload, data_json, at = self._prepared(session_id, name, data)
        stored: list[int] = []
        self.link.outbox.post(replace(call, done=lambda raw: stored.append(int(raw))))
        self.link.outbox.flush()
        event = Event(stored[0], name, payload, at, data_json)
        self._notify(session_id, event.id)  # local waiters need not wait for the listener
        return event

    def post(self, session_id: str, name: EventName, data: dict[str, Any] | None = None) -> None:
        """Store one event soon, in order with this process's other events, without waiting
        for Redis (`live/redis_outbox.py`): a turn's progress and deltas."""
        call = self._prepared(session_id, name, data)[0]
        self.link.outbox.post(replace(call, done=lambda raw: self._notify(session_id, int(raw))))

    def _prepared(
        self, session_id: str, name: str, data: dict[str, Any] | None
    ) -> tuple[Call, dict[str, Any], str, float]:
        """The publish script's keys and arguments (the payload checked here, in the caller)."""
        payload = checked_payload(name, data)
        data_json = json.dumps(payload, ensure_ascii=False)
        at = time.time()
        turn_id = payload.get("turn_id")
        call = Call(
            self._publish,
            keys=[],
            args=[
                *self.publish_settings(),
                name,
                data_json,
                repr(at),
                "1" if name in TERMINAL_EVENTS else "0",
                turn_id if isinstance(turn_id, str) else "",
                session_id,
            ],
        )
        return call, payload, data_json, at

    def publish_settings(self) -> list[str | int]:
        """What another script needs to publish on this log with `PUBLISH_LUA` (the turn
        board ends a lost turn inside its own scripts): key prefix, entries kept, expiry,
        bytes kept per session and in total (`log_of`)."""
        return [self.keys.prefix, self.max_events, self.ttl_ms, self.session_budget, self.total_budget]

    @property
    def buffered_bytes(self) -> int:
        """What the sessions' events count against the total budget (an estimate of Redis's memory)."""
        with answering():
            raw = self.link.client.get(self.keys.bytes)
        return int(str(raw)) if raw else 0

    def heartbeat(self) -> Event:
        with answering():
            return make_event(int(self._next_id(keys=[self.keys.counter, self.keys.epoch])), EventName.HEARTBEAT, {})

    # ------------------------------------------------------------------ reading
    # (a Redis that does not answer raises `LiveStateUnavailable`: a stream ends with an `error`)

    def position(self) -> int:
        with answering():
            return int(self._position(keys=[self.keys.counter, self.keys.epoch]))

    def last_id(self, session_id: str) -> int:
        with answering():
            raw = self.link.client.hget(self.keys.meta(session_id), "last")
        return int(str(raw)) if raw else 0

    def last_terminal(self, session_id: str) -> Event | None:
        with answering():
            raw = self.link.client.hget(self.keys.meta(session_id), "end")
        return _end(str(raw) if raw else None)

    def read(self, session_id: str, after: int) -> Snapshot:
        after = min(max(after, 0), MAX_ID)
        keys = self.keys
        with answering():
            entries, oldest_raw, floor_raw, end_raw, epoch_raw = self._read(
                keys=[keys.stream(session_id), keys.meta(session_id), keys.epoch], args=[f"{after + 1}-0"]
            )
        found = merge_deltas([event for stream_id, fields in entries if (event := _entry(stream_id, fields, after))])
        oldest = _event_id(oldest_raw) if oldest_raw else None
        terminal = _end(end_raw)
        if terminal is not None and terminal.id > after and (oldest is None or terminal.id < oldest):
            found.insert(0, terminal)  # its entry was trimmed; the end of the run is still known
        floor = max(int(floor_raw or 0), int(epoch_raw or 0))
        return Snapshot(found, floor if after < floor else None, oldest)

    # ------------------------------------------------------------------ waiting

    def _watch(self, session_id: str) -> _Watch:
        """The session's local watch, created while someone waits (lock held)."""
        watch = self._watches.get(session_id)
        if watch is None:
            watch = self._watches[session_id] = _Watch(threading.Condition(self._lock))
        return watch

    def _release(self, session_id: str, watch: _Watch) -> None:
        if not watch.waiters and watch.sync_waiting == 0 and self._watches.get(session_id) is watch:
            del self._watches[session_id]

    def _remember(self, session_id: str, event_id: int) -> int:
        """Record the newest id known for the session; the newest known (lock held)."""
        newest = max(self._seen.get(session_id, 0), event_id)
        self._seen[session_id] = newest
        self._seen.move_to_end(session_id)
        if len(self._seen) > SEEN_SESSIONS:
            self._seen.popitem(last=False)
        return newest

    def _see(self, session_id: str, watch: _Watch) -> int:
        """Bring the watch up to the newest id of the session (called after registering, so
        a publish after this still wakes the waiter). The listener hears of every publish, so
        what it remembers is enough; Redis is asked only about a session it has not heard of
        (this keeps a round trip off the event loop for each wait of an asyncio stream)."""
        with self._lock:
            known = self._seen.get(session_id)
        if known is None:
            known = self.last_id(session_id)
        with self._lock:
            watch.seen = max(watch.seen, self._remember(session_id, known))
            return watch.seen

    def _remember_newest(self, session_id: str, watch: _Watch) -> int:
        newest = self.last_id(session_id)
        with self._lock:
            watch.seen = max(watch.seen, self._remember(session_id, newest))
            return watch.seen

    def wait(self, session_id: str, after: int, timeout: float) -> bool:
        with self._lock:
            watch = self._watch(session_id)
            watch.sync_waiting += 1
            alarms = watch.alarms
        deadline = time.monotonic() + timeout
        try:
            if self._see(session_id, watch) > after:
                return True
            while True:  # each turn ends an alarm or the timeout: bounded by `timeout`
                with self._lock:
                    woke = watch.condition.wait_for(
                        partial(_news_or_alarm, watch, after, alarms), deadline - time.monotonic()
                    )
                    if watch.seen > after or not woke:
                        return watch.seen > after
                    alarms = watch.alarms
                # the listener lost Redis: ask Redis itself (raises when it is away)
                if self._remember_newest(session_id, watch) > after:
                    return True
        finally:
            with self._lock:
                watch.sync_waiting -= 1
                self._release(session_id, watch)

    async def wait_async(self, session_id: str, after: int, timeout: float, wakeup: Wakeup) -> bool:
        with self._lock:
            watch = self._watch(session_id)
            watch.waiters.add(wakeup)
        try:
            # no await between registering and sleeping: a wake-up scheduled meanwhile runs
            # only once `sleep` has its future
            if self._see(session_id, watch) > after:
                return True
            await wakeup.sleep(timeout)
        finally:
            with self._lock:
                watch.waiters.discard(wakeup)
                self._release(session_id, watch)
        with self._lock:
            return watch.seen > after

    def _notify(self, session_id: str, event_id: int) -> None:
        """An event was published on the session (here or in another process): wake its waiters."""
        with self._lock:
            self._remember(session_id, event_id)
            watch = self._watches.get(session_id)
            if watch is None or event_id <= watch.seen:
                return
            watch.seen = event_id
            watch.condition.notify_all()
            by_loop: dict[asyncio.AbstractEventLoop, list[Wakeup]] = {}
            for wakeup in watch.waiters:
                by_loop.setdefault(wakeup.loop, []).append(wakeup)
        for loop, wakeups in by_loop.items():
            try:
                loop.call_soon_threadsafe(_fire_all, wakeups)
            except RuntimeError:  # that loop is closed; its streams are gone
                pass

    def _on_wake(self, message: str) -> None:
        event_id, _, session_id = message.partition(" ")
        self._notify(session_id, int(event_id))

    def _wake_all(self) -> None:
        """The listener lost Redis: wake every local waiter, so each stream reads Redis now
        and ends with an `error` if it is away (rather than at its next heartbeat)."""
        with self._lock:
            watches = list(self._watches.values())
            by_loop: dict[asyncio.AbstractEventLoop, list[Wakeup]] = {}
            for watch in watches:
                watch.alarms += 1
                watch.condition.notify_all()
                for wakeup in watch.waiters:
                    by_loop.setdefault(wakeup.loop, []).append(wakeup)
        for loop, wakeups in by_loop.items():
            try:
                loop.call_soon_threadsafe(_fire_all, wakeups)
            except RuntimeError:  # that loop is closed; its streams are gone
                pass

    def _resync(self) -> None:
        """After the listener reconnected: messages may have been lost, so forget what it
        heard and ask Redis."""
        with self._lock:
            self._seen.clear()
            watched = list(self._watches)
        for session_id in watched:
            self._notify(session_id, self.last_id(session_id))


def _news_or_alarm(watch: _Watch, after: int, alarms: int) -> bool:
    return watch.seen > after or watch.alarms != alarms


def _fire_all(wakeups: list[Wakeup]) -> None:
    for wakeup in wakeups:
        wakeup.fire()
