"""The event bus (SPEC 7): ids, replay with honest gaps, compact deltas, bounded memory,
sync and async waiting, durable ids across restarts, and the stream follower's rules.

Tests that take `make_bus` run against both backends of the `EventLog` interface: the
in-process `EventBus` and the Redis one (`RedisEventLog`, on a real private redis-server,
tests/redis_support.py). What only Redis does (several processes on one log) is in
tests/live/test_redis_live.py."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from live.bus import EventBus, PrivatePayloadError, Wakeup
from live.follow import FollowPlan, StreamFollower
from live.ids import IdClock
from live.interfaces import EventLog
from testing.waiting import HUNG_S
from tests.async_support import run_async
from tests.redis_support import redis_log

BYTES_PER_SMALL_EVENT = 200  # roughly what one short event costs the in-process buffer


@pytest.fixture(params=["memory", "redis"])
def make_bus(request) -> Iterator[Callable[..., EventLog]]:
    """`make_bus(budget_bytes=None, total_bytes=None)`: a fresh log of the test's backend, with
    these byte budgets per session and in total (the defaults otherwise), on both backends."""
    closers: list[Callable[[], None]] = []

    def build(budget_bytes: int | None = None, total_bytes: int | None = None) -> EventLog:
        limits = {"session_budget_bytes": budget_bytes, "total_budget_bytes": total_bytes}
        given = {name: value for name, value in limits.items() if value is not None}
        if request.param == "memory":
            return EventBus(**given)
        bus, close = redis_log(request.getfixturevalue("redis_url"), **given)
        closers.append(close)
        return bus

    yield build
    for close in closers:
        close()


def names(events):
    return [event.name for event in events]


def delta(turn: str, text: str, pass_: int = 0) -> dict:
    return {"turn_id": turn, "pass": pass_, "text": text}


def test_ids_increase_within_and_across_sessions(make_bus):
    bus = make_bus()
    ids = [bus.publish(session, "turn.started", {"turn_id": "t"}).id for session in "abab"]
    assert ids == sorted(ids) and len(set(ids)) == 4


def test_ids_keep_increasing_across_a_restart_even_when_the_clock_steps_back(tmp_path):
    path = tmp_path / "event-ids"
    first = IdClock(path)
    issued = [first.next() for _ in range(5)]
    second = IdClock(path, clock=lambda: issued[0] - 10_000_000)  # a new process; the clock went back 10 s
    assert second.next() > max(issued)
    assert second.first > max(issued)


def test_replay_after_an_id_returns_only_what_came_after(make_bus):
    bus = make_bus()
    ids = [bus.publish("s", name, {"turn_id": "t"}).id for name in ("turn.started", "provider.request", "done")]
    snapshot = bus.read("s", ids[0])
    assert [event.id for event in snapshot.events] == ids[1:] and snapshot.gap is None


def test_deltas_are_stored_as_one_run_and_replayed_from_any_id(make_bus):
    bus = make_bus()
    bus.publish("s", "turn.started", {"turn_id": "t"})
    pieces = ["Hel", "lo, ", "wor", "ld"]
    ids = [bus.publish("s", "answer.delta", delta("t", piece)).id for piece in pieces]
    for index, cursor in enumerate(ids):
        replay = bus.read("s", cursor).events
        text = "".join(event.data["text"] for event in replay)
        assert text == "".join(pieces[index + 1 :])
        if replay:
            assert replay[-1].id == ids[-1]
    whole = bus.read("s", ids[0] - 1).events
    assert [(e.name, e.data["text"]) for e in whole] == [("answer.delta", "Hello, world")]


def shown(events) -> str:
    """What a client shows: the deltas' text after the last `answer.reset`."""
    text = ""
    for event in events:
        text = (
            "" if event.name == "answer.reset" else text + event.data.get("text", "") * (event.name == "answer.delta")
        )
    return text


def test_a_finished_turn_replays_from_any_id_as_it_streamed(make_bus):
    """Redis compacts a finished turn's deltas into one entry: a reader from any id still gets
    exactly the text after that id (multi-byte text included), and what a client shows is the
    same from any cursor."""
    bus = make_bus()
    start = bus.publish("s", "turn.started", {"turn_id": "t"}).id
    bus.publish("s", "answer.delta", delta("t", "dropped "))
    bus.publish("s", "answer.delta", delta("t", "too"))
    reset = bus.publish("s", "answer.reset", {"turn_id": "t", "pass": 0}).id
    pieces = ["Hél", "lo, 🌍 ", "wör", "ld"]
    ids = [bus.publish("s", "answer.delta", delta("t", piece)).id for piece in pieces]
    bus.publish("s", "message.stored", {"turn_id": "t", "id": 1, "role": "assistant"})
    end = bus.publish("s", "done", {"turn_id": "t", "reply": "".join(pieces)})
    for cursor in (start, reset):
        events = bus.read("s", cursor).events
        assert shown(events) == "".join(pieces) and events[-1] == end
    for index, cursor in enumerate(ids):
        events = bus.read("s", cursor).events
        assert shown(events) == "".join(pieces[index + 1 :]) and events[-1] == end


def test_a_reader_from_any_id_of_a_finished_turn_gets_the_rest_in_the_order_it_was_published(make_bus):
    """A live follower a few pieces behind when the turn ends (Redis compacts the deltas at its
    end) gets the text it has not seen before `provider.response` and `message.stored`, as
    published, and nothing it had: never a delta after the stored message (SPEC 7)."""
    bus = make_bus()
    bus.publish("s", "turn.started", {"turn_id": "t"})
    pieces = ["one ", "two ", "three"]
    ids = [bus.publish("s", "answer.delta", delta("t", piece)).id for piece in pieces]
    response = bus.publish("s", "provider.response", {"turn_id": "t", "pass": 0}).id
    stored = bus.publish("s", "message.stored", {"turn_id": "t", "id": 1, "role": "assistant"}).id
    bus.publish("s", "done", {"turn_id": "t", "reply": "".join(pieces)})
    for index, cursor in enumerate(ids):
        events = bus.read("s", cursor).events
        rest = "".join(pieces[index + 1 :])
        expected = (["answer.delta"] if rest else []) + ["provider.response", "message.stored", "done"]
        assert names(events) == expected and shown(events) == rest
    assert names(bus.read("s", response).events) == ["message.stored", "done"]
    assert names(bus.read("s", stored).events) == ["done"]


def test_runs_of_different_passes_stay_apart(make_bus):
    bus = make_bus()
    bus.publish("s", "answer.delta", delta("t", "a", 0))
    bus.publish("s", "answer.reset", {"turn_id": "t", "pass": 0})
    bus.publish("s", "answer.delta", delta("t", "b", 0))
    bus.publish("s", "answer.delta", delta("t", "c", 1))
    assert [(e.name, e.data.get("text")) for e in bus.read("s", 0).events] == [
        ("answer.delta", "a"),
        ("answer.reset", None),
        ("answer.delta", "b"),
        ("answer.delta", "c"),
    ]


def test_a_client_behind_the_buffer_is_told_about_the_gap(make_bus):
    bus = make_bus(4000)
    first = bus.publish("s", "turn.started", {"turn_id": "t"}).id
    for number in range(100):
        bus.publish("s", "tick", {"turn_id": "t", "n": number})
    snapshot = bus.read("s", first)
    assert snapshot.gap is not None and snapshot.gap >= first
    assert snapshot.events and snapshot.events[0].id > snapshot.gap
    assert bus.read("s", snapshot.gap).gap is None  # reconnecting with the gap's id: no hole again


def test_a_cursor_from_before_this_process_is_a_gap():
    old = IdClock().next()
    bus = EventBus(IdClock())
    bus.publish("s", "turn.started", {"turn_id": "t"})
    assert bus.read("s", old).gap is not None


def test_total_memory_is_bounded_across_sessions(make_bus):
    bus = make_bus(1 << 20, 200_000)
    for session in range(200):
        for _ in range(20):
            bus.publish(f"s{session}", "answer.delta", delta("t", "x" * 200))
        bus.publish(f"s{session}", "done", {"turn_id": "t", "reply": "x" * 4000})
    assert bus.buffered_bytes <= 200_000 + 20_000  # the newest session's entries may exceed it alone


def test_a_session_whose_events_went_for_the_total_budget_reports_the_gap(make_bus):
    bus = make_bus(1 << 20, 20_000)
    first = bus.publish("old", "turn.started", {"turn_id": "t"})
    bus.publish("old", "done", {"turn_id": "t", "reply": "x" * 1000})
    for session in range(20):  # newer sessions push the least recently active one out
        bus.publish(f"s{session}", "done", {"turn_id": "t", "reply": "x" * 2000})
    snapshot = bus.read("old", first.id)
    assert snapshot.gap is not None and snapshot.gap > first.id and snapshot.events == []
    assert bus.read("old", snapshot.gap).gap is None


def test_the_end_of_the_latest_run_survives_eviction_of_its_entry(make_bus):
    bus = make_bus(3000)
    end = bus.publish("s", "done", {"turn_id": "t1", "reply": "answer"})
    for number in range(50):
        bus.publish("s", "tick", {"turn_id": "t2", "n": number})
    assert bus.last_terminal("s") == end
    assert bus.read("s", end.id - 1).events[0] == end


@pytest.mark.parametrize("key", ["prompt", "content", "reply", "reference_solution", "tests", "messages", "text"])
def test_private_keys_are_refused(make_bus, key):
    with pytest.raises(PrivatePayloadError):
        make_bus().publish("s", "provider.response", {key: "secret"})


def test_answer_delta_carries_exactly_its_three_fields(make_bus):
    with pytest.raises(ValueError):
        make_bus().publish("s", "answer.delta", {"turn_id": "t", "pass": 0, "text": "x", "prompt": "secret"})


def test_sync_wait_wakes_on_publish(make_bus):
    bus = make_bus()
    after = bus.position()
    threading.Timer(0.05, lambda: bus.publish("s", "turn.started", {"turn_id": "t"})).start()
    assert bus.wait("s", after, timeout=5) is True
    assert bus.wait("s", bus.position(), timeout=0.01) is False


def test_async_wait_wakes_on_publish_from_a_thread(make_bus):
    bus = make_bus()

    async def main() -> tuple[bool, bool]:
        after = bus.position()
        threading.Timer(0.05, lambda: bus.publish("s", "turn.started", {"turn_id": "t"})).start()
        loop = asyncio.get_running_loop()
        woke = await bus.wait_async("s", after, 5, Wakeup(loop))
        timed_out = await bus.wait_async("s", bus.position(), 0.01, Wakeup(loop))
        return woke, timed_out

    assert run_async(main) == (True, False)


def test_many_async_watchers_of_one_session_all_wake(make_bus):
    bus = make_bus()

    async def main() -> list[bool]:
        loop = asyncio.get_running_loop()
        after = bus.position()
        threading.Timer(0.05, lambda: bus.publish("s", "turn.started", {"turn_id": "t"})).start()
        return list(await asyncio.gather(*(bus.wait_async("s", after, 5, Wakeup(loop)) for _ in range(50))))

    assert run_async(main) == [True] * 50


def test_heartbeats_take_an_id_but_are_never_buffered(make_bus):
    bus = make_bus()
    started = bus.publish("s", "turn.started", {"turn_id": "t"})
    beat = bus.heartbeat()
    later = bus.publish("s", "done", {"turn_id": "t"})
    assert started.id < beat.id < later.id
    assert names(bus.read("s", 0).events) == ["turn.started", "done"]


def follow(bus: EventLog, plan: FollowPlan) -> list[str]:
    events, finished = StreamFollower(bus, plan).step()
    assert finished
    return names(events)


def test_follower_ends_with_its_own_turn_and_can_skip_others(make_bus):
    bus = make_bus()
    start = bus.position()
    bus.publish("s", "turn.started", {"turn_id": "mine"})
    bus.publish("s", "job.started", {"turn_id": "job"})
    bus.publish("s", "done", {"turn_id": "job"})
    bus.publish("s", "done", {"turn_id": "mine"})
    assert follow(bus, FollowPlan("s", start, "mine", only_turn=True)) == ["turn.started", "done"]
    assert follow(bus, FollowPlan("s", start, "mine")) == ["turn.started", "job.started", "done", "done"]


def test_follower_reports_a_gap_first(make_bus):
    bus = make_bus(2000)
    first = bus.publish("s", "turn.started", {"turn_id": "t"}).id
    for number in range(40):
        bus.publish("s", "tick", {"turn_id": "t", "n": number})
    bus.publish("s", "done", {"turn_id": "t"})
    events, finished = StreamFollower(bus, FollowPlan("s", first, "t", from_client=True)).step()
    assert finished and events[0].name == "replay.gap"
    assert events[0].data["after"] == first and events[0].id < events[1].id
    assert events[-1].name == "done"


def test_follower_waits_for_more_when_its_turn_is_not_over(make_bus):
    bus = make_bus()
    start = bus.position()
    bus.publish("s", "turn.started", {"turn_id": "t"})
    follower = StreamFollower(bus, FollowPlan("s", start, "t"))
    events, finished = follower.step()
    assert names(events) == ["turn.started"] and not finished
    bus.publish("s", "answer.delta", delta("t", "hi"))
    bus.publish("s", "done", {"turn_id": "t"})
    events, finished = follower.step()
    assert names(events) == ["answer.delta", "done"] and finished


def test_many_waiting_threads_all_wake(make_bus, tmp_path):
    bus = make_bus()
    after = bus.position()
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(bus.wait("s", after, 5))) for _ in range(20)]
    for thread in threads:
        thread.start()
    time.sleep(0.05)  # most threads wait by now; one that comes later sees the event at once (no race)
    bus.publish("s", "turn.started", {"turn_id": "t"})
    for thread in threads:
        thread.join(HUNG_S)
    assert results == [True] * 20


@pytest.mark.parametrize("text", ['héllo wörld / 🌍 \\ "quoted" \n new line', "lone \ud800 surrogate", ""])
def test_text_comes_back_exactly_as_published(make_bus, text):
    bus = make_bus()
    start = bus.publish("s", "turn.started", {"turn_id": "t"}).id
    bus.publish("s", "answer.delta", delta("t", text))
    end = bus.publish("s", "done", {"turn_id": "t", "reply": text})
    events = bus.read("s", start).events
    assert [e.data.get("text") for e in events] == [text, None] and events[-1].data["reply"] == text
    assert bus.last_terminal("s") == end
