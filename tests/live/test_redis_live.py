"""What only the Redis backend of live turns does (REDIS_URL, SPEC 13): several processes share
one event log and one board of running turns.

Each `redis_live(...)` / `redis_log(...)` below is what one server process builds: its own
connections and its own listener thread, on one real private redis-server
(tests/redis_support.py). Two of them in one test are two processes: they must see each
other's events (replay, gaps, wake-ups), refuse a second turn (409), stop each other's turns,
and free the session of a process that vanished once its lease expires. The rules both
backends share run on both in tests/live/test_event_bus.py and tests/live/test_streams.py; two real
server processes over HTTP are in tests/live/test_multiprocess_live.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from config.settings import RateLimits, parse_rate_limits
from live import Live
from live.bus import Wakeup
from live.follow import FollowPlan, StreamFollower
from live.limits import RateLimiter
from live.redis_bus import RedisEventLog
from live.redis_turns import RemoteTurn
from live.turns import TurnDone, TurnInProgress, TurnLease
from testing.ports import free_port
from testing.waiting import HUNG_S, wait_until
from tests.async_support import run_async
from tests.conftest import new_token
from tests.process_support import clean_env, run_app
from tests.redis_support import PORTS, PREFIX, RedisServer, redis_live, redis_log


def running(lease: TurnLease) -> TurnLease:
    """A claim whose turn was handed to a worker (the desk's `Claim.start`): only its end, or
    its lost lease, frees the session; a claim never started is given back by the keeper."""
    lease.started = True
    return lease


def test_a_claim_whose_turn_never_started_is_given_back_by_the_keeper(process, monkeypatch):
    """A request that claimed and died before starting its turn (the desk's block gives a claim
    back on every way out; this is the backstop): the keeper renews only started claims and
    gives an unstarted one back after a grace, so the session is never claimed for good."""
    monkeypatch.setattr("live.redis_turns.UNSTARTED_GRACE_S", 0.5)
    a, b = process(lease_s=3.0), process(lease_s=3.0)
    stuck = a.turns.claim("s", "chat", a.bus.position())
    wait_until(lambda: b.turns.active("s") is None, "the unstarted claim was renewed for good", timeout_s=10)
    assert b.turns.claim("s", "chat", 0).turn_id != stuck.turn_id


@pytest.fixture
def process(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., Live]]:
    """`process(lease_s=30)`: the live state of one more server process on the test's Redis."""
    opened: list[Live] = []

    def start(lease_s: float = 30.0) -> Live:
        live = redis_live(redis_url, str(tmp_path), lease_s=lease_s)
        opened.append(live)
        return live

    yield start
    for live in opened:
        live.close()


def end_turn(live: Live, lease: TurnLease) -> None:
    answer = {"turn_id": lease.turn_id}
    live.turns.finish(lease, lambda: live.bus.publish(lease.session_id, "done", answer), TurnDone(answer))


# events ------------------------------------------------------------------------------------


def test_two_processes_see_each_others_events_with_increasing_ids(process):
    a, b = process(), process()
    ids = [(a if n % 2 else b).bus.publish("s", "tick", {"turn_id": "t", "n": n}).id for n in range(10)]
    assert ids == sorted(ids) and len(set(ids)) == 10
    assert [event.data["n"] for event in b.bus.read("s", 0).events] == list(range(10))
    assert a.bus.last_id("s") == b.bus.last_id("s") == ids[-1]


def test_replay_after_a_cursor_from_another_process(process):
    a, b = process(), process()
    first = a.bus.publish("s", "turn.started", {"turn_id": "t"})
    a.bus.publish("s", "answer.delta", {"turn_id": "t", "pass": 0, "text": "Hel"})
    a.bus.publish("s", "answer.delta", {"turn_id": "t", "pass": 0, "text": "lo"})
    end = a.bus.publish("s", "done", {"turn_id": "t", "reply": "Hello"})
    replay = b.bus.read("s", first.id)
    assert [(e.name, e.data.get("text")) for e in replay.events] == [("answer.delta", "Hello"), ("done", None)]
    assert replay.gap is None and b.bus.last_terminal("s") == end


def test_a_cursor_older_than_what_redis_keeps_gets_a_gap_on_another_process(redis_url):
    a, close_a = redis_log(redis_url, max_events=5)
    b, close_b = redis_log(redis_url, max_events=5)
    try:
        first = a.publish("s", "turn.started", {"turn_id": "t"}).id
        for n in range(20):
            a.publish("s", "tick", {"turn_id": "t", "n": n})
        a.publish("s", "done", {"turn_id": "t"})
        events, finished = StreamFollower(b, FollowPlan("s", first, "t", from_client=True)).step()
        assert finished and events[0].name == "replay.gap" and events[0].data["after"] == first
        assert [e.name for e in events[1:]][-1] == "done" and len(events) == 6  # the gap, then the 5 kept
        assert b.read("s", events[0].id).gap is None  # reconnecting from the gap's id: no hole again
    finally:
        close_a()
        close_b()


def test_posted_events_arrive_in_order_before_a_later_publish(process):
    """A turn posts its progress without waiting for Redis (live/redis_outbox.py); its
    terminal event, published after, still comes after every one of them, for every process."""
    a, b = process(), process()
    for n in range(300):  # more than one pipeline's batch
        a.bus.post("s", "tick", {"turn_id": "t", "n": n})
    end = a.bus.publish("s", "done", {"turn_id": "t"})
    events = b.bus.read("s", 0).events
    assert [event.data.get("n") for event in events] == [*range(300), None]
    ids = [event.id for event in events]
    assert ids == sorted(ids) and len(set(ids)) == 301 and ids[-1] == end.id


def test_posts_from_many_threads_keep_each_thread_s_order(process):
    a, b = process(), process()

    def turn(t: int) -> None:
        for n in range(50):
            a.bus.post(f"s{t}", "tick", {"turn_id": f"t{t}", "n": n})
        a.bus.publish(f"s{t}", "done", {"turn_id": f"t{t}"})

    threads = [threading.Thread(target=turn, args=(t,)) for t in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HUNG_S)
    for t in range(6):
        names_and_n = [(e.name, e.data.get("n")) for e in b.bus.read(f"s{t}", 0).events]
        assert names_and_n == [*(("tick", n) for n in range(50)), ("done", None)]


def test_a_post_checks_the_payload_at_once(process):
    from live.bus import PrivatePayloadError

    with pytest.raises(PrivatePayloadError):
        process().bus.post("s", "tool.started", {"turn_id": "t", "content": "secret"})


def test_posted_events_survive_a_redis_that_forgot_its_scripts(process, redis_url):
    """A restarted Redis has no scripts: a pipeline of posts is sent again once it is loaded."""
    live = process()
    live.bus.post("s", "tick", {"turn_id": "t", "n": 0})
    live.bus.publish("s", "done", {"turn_id": "t"})
    redis.Redis.from_url(redis_url).script_flush()
    live.bus.post("s", "tick", {"turn_id": "t2", "n": 1})
    live.bus.post("s", "tick", {"turn_id": "t2", "n": 2})
    live.bus.publish("s", "done", {"turn_id": "t2"})
    assert [(e.name, e.data.get("n")) for e in live.bus.read("s", 0).events] == [
        ("tick", 0),
        ("done", None),
        ("tick", 1),
        ("tick", 2),
        ("done", None),
    ]


def test_calls_that_could_not_be_sent_fail_the_next_flush_once(redis_url, redis_server: RedisServer):
    """Lost events are not silent: the turn's terminal publish (which flushes first) raises,
    its client gets the 503 a failed publish gives; once Redis is back, calls go out again."""
    from live.redis_outbox import Call, Outbox

    client = redis.Redis.from_url(redis_url, socket_timeout=2)
    echo = client.register_script("return ARGV[1]")
    results: list[bytes] = []
    outbox = Outbox(client)
    try:
        redis_server.stop()
        outbox.post(Call(echo, keys=[], args=["lost"], done=results.append))
        with pytest.raises(redis.ConnectionError):
            outbox.flush()
        redis_server.start()
        outbox.flush()  # the error is reported once
        for word in ("a", "b"):
            outbox.post(Call(echo, keys=[], args=[word], done=results.append))
        outbox.flush()
        assert results == [b"a", b"b"]
    finally:
        outbox.close()
        client.close()


def test_a_publish_in_one_process_wakes_waiting_streams_in_another(process):
    a, b = process(), process()

    async def main() -> list[bool]:
        loop = asyncio.get_running_loop()
        after = b.bus.position()
        threading.Timer(0.1, lambda: a.bus.publish("s", "turn.started", {"turn_id": "t"})).start()
        return list(await asyncio.gather(*(b.bus.wait_async("s", after, HUNG_S, Wakeup(loop)) for _ in range(20))))

    started = time.monotonic()
    assert run_async(main) == [True] * 20
    assert time.monotonic() - started < HUNG_S  # woken by the publish, not by the timeout
    after = b.bus.position()
    threading.Timer(0.1, lambda: a.bus.publish("s", "done", {"turn_id": "t"})).start()
    assert b.bus.wait("s", after, HUNG_S) is True
    assert b.bus.wait("s", b.bus.position(), 0.05) is False


def test_ids_keep_increasing_when_the_app_restarts(process):
    first = process()
    before = first.bus.publish("s", "tick", {"turn_id": "t"}).id
    first.close()
    again = process()
    assert again.bus.position() >= before
    assert again.bus.publish("s", "tick", {"turn_id": "t"}).id > before
    assert again.bus.read("s", before).gap is None  # the app's restart lost nothing


def test_after_redis_loses_its_data_ids_still_increase_and_old_cursors_get_a_gap(process, redis_server: RedisServer):
    live = process()
    old = live.bus.publish("s", "tick", {"turn_id": "t"}).id
    redis_server.restart()  # no persistence: every key is gone
    fresh = process()
    new = fresh.bus.publish("s", "tick", {"turn_id": "t"}).id
    assert new > old
    snapshot = fresh.bus.read("s", old)
    assert snapshot.gap is not None and snapshot.gap >= old and [e.id for e in snapshot.events] == [new]


# turns -------------------------------------------------------------------------------------


def test_one_turn_per_session_across_processes(process):
    a, b = process(), process()
    lease = running(a.turns.claim("s", "chat", a.bus.position()))
    with pytest.raises(TurnInProgress) as busy:
        b.turns.claim("s", "chat", b.bus.position())
    assert busy.value.turn_id == lease.turn_id
    seen = b.turns.active("s")
    assert isinstance(seen, RemoteTurn)
    assert (seen.turn_id, seen.kind, seen.start_cursor, seen.started_at) == (
        lease.turn_id,
        "chat",
        lease.start_cursor,
        lease.started_at,
    )
    assert a.turns.active("s") is lease  # the owner sees its own lease
    b.turns.claim("other", "chat", 0)  # other sessions are free


def test_publishing_the_end_frees_the_session_for_every_process_at_once(process):
    """`finish` is atomic for `claim`: the terminal event and the release are one step, so a
    client that got `done` may start the next turn before the owner even deletes its key."""
    a, b = process(), process()
    lease = running(a.turns.claim("s", "chat", a.bus.position()))
    a.bus.publish("s", "done", {"turn_id": lease.turn_id})  # the end, before `finish` releases
    assert b.turns.active("s") is None
    following = b.turns.claim("s", "chat", b.bus.position())
    a.turns.finish(lease, lambda: None, (200, {}))  # the owner's release does not free the new turn
    assert b.turns.active("s") is following
    with pytest.raises(TurnInProgress):
        a.turns.claim("s", "chat", 0)


def test_finish_then_abandon_release_the_session(process):
    a, b = process(), process()
    lease = running(a.turns.claim("s", "chat", a.bus.position()))
    end_turn(a, lease)
    assert lease.outcome.result(0) == TurnDone({"turn_id": lease.turn_id}) and b.turns.active("s") is None
    unstarted = b.turns.claim("s", "chat", 0)
    b.turns.abandon(unstarted)
    assert a.turns.active("s") is None and unstarted.outcome.cancelled()


@pytest.mark.parametrize("session", ["s", "a session {with} spaces"])
def test_cancel_from_another_process_stops_the_turn(process, session):
    a, b = process(), process()
    lease = running(a.turns.claim(session, "chat", a.bus.position()))
    assert b.turns.cancel(session, "turn_wrong") is None and not lease.token.cancelled
    assert b.turns.cancel(session, lease.turn_id) == lease.turn_id
    wait_until(lambda: lease.token.cancelled, "the owner never got the cancel")
    assert lease.token.reason == "stopped by the user"
    end_turn(a, lease)
    assert b.turns.cancel(session) is None  # nothing left to stop


def test_wakeups_and_cancels_survive_a_lost_listener_connection(process, redis_url):
    """Redis drops every pub/sub connection: messages sent meanwhile are lost, so the
    listener, once back, makes the waiters re-read Redis and the owner re-check cancel flags."""
    a, b = process(), process()
    lease = running(a.turns.claim("s", "chat", a.bus.position()))
    after = a.bus.position()
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(a.bus.wait("s", after, HUNG_S)))
    waiter.start()  # a waits on "s" (registered before anything is published)
    wait_until(lambda: "s" in a.bus._watches, "the waiter never started")  # (no event can tell yet)
    admin = redis.Redis.from_url(redis_url)
    try:
        assert admin.client_kill_filter(_type="pubsub") >= 2
    finally:
        admin.close()
    b.bus.publish("s", "tick", {"turn_id": lease.turn_id})  # sent while a's listener is away
    assert b.turns.cancel("s") == lease.turn_id
    wait_until(lambda: lease.token.cancelled, "the cancel was lost with the connection")
    waiter.join(HUNG_S)
    assert woke == [True]  # woken by the resync: a timeout would have answered False


@pytest.mark.parametrize("session", ["s", "a session {with} spaces"])
def test_a_vanished_owner_frees_the_session_and_its_turn_ends_with_an_error(process, session):
    """The owner dies mid-turn: its renewals stop, so the session is free once the lease runs
    out, and another process ends the lost turn (`error`, `turn_lost`): streams following it
    anywhere end instead of waiting for ever."""
    a, b = process(lease_s=1.0), process(lease_s=1.0)
    lease = running(a.turns.claim(session, "chat", a.bus.position()))
    a.bus.publish(session, "turn.started", {"turn_id": lease.turn_id})
    follower = StreamFollower(b.bus, FollowPlan(session, lease.start_cursor, lease.turn_id))
    assert [e.name for e in follower.step()[0]] == ["turn.started"]
    time.sleep(2.0)  # twice the lease: the owner's renewals keep it
    with pytest.raises(TurnInProgress):
        b.turns.claim(session, "chat", 0)
    a.close()  # the owner process dies: no renewal, no `done`
    wait_until(lambda: b.turns.active(session) is None, "the lease never expired", timeout_s=5)
    wait_until(lambda: b.bus.last_terminal(session) is not None, "nobody ended the lost turn", timeout_s=5)
    events, finished = follower.step()
    assert finished and events[-1].name == "error"
    assert events[-1].data["turn_id"] == lease.turn_id and events[-1].data["error"]["code"] == "turn_lost"
    assert b.turns.claim(session, "chat", 0).turn_id != lease.turn_id


def test_a_turn_whose_claim_is_gone_stops_and_was_ended_for_its_followers(process, redis_url):
    """Its process stalled past its lease (here: the key deleted, as an expiry would) and another
    turn may claim the session: the stalled turn is stopped at its next renewal, and was ended
    with `turn_lost` as the next claim came, so it never writes over the next turn."""
    a, b = process(lease_s=1.0), process()
    lease = running(a.turns.claim("s", "chat", a.bus.position()))
    admin = redis.Redis.from_url(redis_url)
    try:
        admin.delete(f"{PREFIX}turn:{{s}}")
    finally:
        admin.close()
    following = StreamFollower(b.bus, FollowPlan("s", lease.start_cursor, lease.turn_id, only_turn=True))
    nxt = b.turns.claim("s", "chat", b.bus.position())
    events, finished = following.step()
    assert finished and [(e.name, e.data["error"]["code"]) for e in events] == [("error", "turn_lost")]
    wait_until(lambda: lease.token.cancelled, "the stalled turn was never stopped")
    assert b.turns.active("s").turn_id == nxt.turn_id


def test_a_finished_turn_is_never_ended_twice(process):
    a, b = process(lease_s=1.0), process(lease_s=1.0)
    lease = running(a.turns.claim("s", "chat", a.bus.position()))
    end_turn(a, lease)
    time.sleep(1.5)  # past the lease: the keepers look for lost turns meanwhile
    assert [e.name for e in b.bus.read("s", lease.start_cursor).events] == ["done"]


# byte budgets -------------------------------------------------------------------------------


def post_turn(log: RedisEventLog, session: str, number: int, pieces: int = 40, finish: bool = True) -> None:
    """The events of one plain chat turn, as the runner publishes them (an 800-character answer)."""
    turn = f"turn_{number:032x}"
    log.post(session, "turn.started", {"turn_id": turn, "kind": "chat"})
    log.post(session, "message.stored", {"turn_id": turn, "id": 2 * number, "role": "user"})
    log.post(session, "provider.request", {"turn_id": turn, "provider": "openai", "pass": 0})
    for _ in range(pieces):
        log.post(session, "answer.delta", {"turn_id": turn, "pass": 0, "text": "word " * 4})
    log.post(session, "message.stored", {"turn_id": turn, "id": 2 * number + 1, "role": "assistant"})
    reply = "word " * 4 * pieces
    log.publish(
        session, "done", {"turn_id": turn, "reply": reply, "messages": [{"role": "assistant", "content": reply}]}
    )


def redis_memory(url: str, pattern: str = f"{PREFIX}*") -> int:
    """What Redis itself says the test's keys take (MEMORY USAGE of each, all samples)."""
    admin = redis.Redis.from_url(url)
    try:
        return sum(admin.memory_usage(key, samples=0) or 0 for key in admin.scan_iter(pattern))
    finally:
        admin.close()


def test_a_finished_turn_s_deltas_become_one_entry_and_redis_frees_their_memory(redis_url):
    log, close = redis_log(redis_url)
    admin = redis.Redis.from_url(redis_url)
    try:
        post_turn(log, "s", 0, pieces=200)
        log.publish("s", "turn.started", {"turn_id": "next"})  # (compaction happens at the end itself)
        stream = f"{PREFIX}ev:{{s}}"
        entries = admin.xrange(stream)
        assert [fields[b"n"] for _, fields in entries].count(b"answer.delta") == 1 and len(entries) == 7
        replay = log.read("s", 0).events
        assert "".join(e.data["text"] for e in replay if e.name == "answer.delta") == "word " * 4 * 200
    finally:
        admin.close()
        close()
    log, close = redis_log(redis_url)
    try:
        for number in range(30):  # finished turns: their deltas compacted
            post_turn(log, "compacted", number)
        compacted = redis_memory(redis_url, f"{PREFIX}*{{compacted}}")
        for number in range(30):  # the same events, ended as another run's: nothing to compact
            post_turn(log, "kept", number, finish=False)
            reply = "word " * 4 * 40
            log.publish("kept", "done", {"turn_id": "other", "reply": reply, "messages": [{"content": reply}]})
        kept = redis_memory(redis_url, f"{PREFIX}*{{kept}}")
        assert compacted < kept * 0.7, (compacted, kept)
    finally:
        close()


def test_one_user_streaming_many_turns_keeps_redis_under_the_byte_budgets(redis_url):
    session_budget, total_budget = 64 << 10, 256 << 10
    slack = 32 << 10  # not counted: the id counters, the budgets' indexes, each session's small hash
    log, close = redis_log(redis_url, session_budget_bytes=session_budget, total_budget_bytes=total_budget)
    try:
        first = log.publish("s0", "turn.started", {"turn_id": "t"}).id
        for session in range(10):  # about 8 KB a turn: 1.6 MB without budgets
            for number in range(20):
                post_turn(log, f"s{session}", number)
        assert log.buffered_bytes <= total_budget
        assert redis_memory(redis_url) <= total_budget + slack
        for number in range(20, 60):  # one session alone stays under its own budget
            post_turn(log, "s9", number)
        assert redis_memory(redis_url) <= total_budget + slack
        # (trimming frees a stream's 4 KB nodes whole: the oldest may still hold trimmed room)
        assert 0 < redis_memory(redis_url, f"{PREFIX}ev:{{s9}}") <= session_budget + (8 << 10)
        replay = log.read("s0", first)  # the oldest session's events went first
        assert replay.gap is not None and replay.gap > first
        follower = StreamFollower(log, FollowPlan("s0", first, None, from_client=True, replay_only=True))
        assert [event.name for event in follower.step()[0]][:1] == ["replay.gap"]
    finally:
        close()


# rate limits -------------------------------------------------------------------------------


def test_rate_limits_are_shared_through_redis(redis_url):
    rules = parse_rate_limits("turns=2/minute")
    assert isinstance(rules, RateLimits)
    a, b = RateLimiter(rules, redis_url), RateLimiter(rules, redis_url)
    assert a.hit("turns", "7").allowed and b.hit("turns", "7").allowed
    refused = a.hit("turns", "7")
    assert not refused.allowed and refused.limit == "turns" and refused.retry_after_s >= 1
    assert b.hit("turns", "8").allowed  # another user's budget is its own
    assert RateLimiter(rules).hit("turns", "7").allowed  # in-process storage shares nothing


# start-up ----------------------------------------------------------------------------------


def test_a_server_whose_redis_does_not_answer_stops_with_one_line(tmp_path, base_settings):
    dead = free_port(PORTS)  # nobody listens there
    result = run_app(clean_env(tmp_path, base_settings, REDIS_URL=f"redis://127.0.0.1:{dead}/0"))
    assert result.returncode == 2
    assert result.stderr.strip().startswith("Error: REDIS_URL does not answer") and "Traceback" not in result.stderr


def test_requests_answer_503_while_redis_is_down_and_work_again_after(make_app, fake_llm, redis_url, redis_server):
    app = make_app(llm_base_url=fake_llm.openai_base_url, redis_url=redis_url)
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    client = app.test_client()
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    redis_server.stop()
    try:
        for response in (
            client.post("/chat", json={"message": "hi", "session_id": session_id}, headers=auth),
            client.get(f"/sessions/{session_id}", headers=auth),
            client.post(f"/sessions/{session_id}/cancel", headers=auth),
        ):
            assert response.status_code == 503, response.get_data(as_text=True)
            assert response.get_json()["error"]["code"] == "live_state_unavailable"
    finally:
        redis_server.start()  # empty: as after a crash of a Redis without persistence
    fake_llm.queue("back again")
    answer = client.post("/chat", json={"message": "hi", "session_id": session_id}, headers=auth)
    assert answer.status_code == 200 and answer.get_json()["reply"] == "back again"
