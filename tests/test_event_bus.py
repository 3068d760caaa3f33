"""The per-session event bus: ids, replay, terminal close, heartbeats, private payloads."""

from __future__ import annotations

import threading
import time

import pytest

from events.bus import EventBus, PrivatePayloadError


def names(events):
    return [event.name for event in events if event is not None]


def test_ids_increase_per_session_and_sessions_are_separate():
    bus = EventBus()
    a = [bus.publish("a", "turn.started").id, bus.publish("a", "heartbeat").id]
    b = [bus.publish("b", "turn.started").id]
    assert a == [1, 2] and b == [1]


def test_late_subscriber_gets_the_whole_finished_run_and_is_closed():
    bus = EventBus()
    bus.publish("s", "turn.started")
    bus.publish("s", "message.stored", {"id": 1, "role": "user"})
    bus.publish("s", "done", {"session_id": "s"})
    events = list(bus.subscribe("s", max_wait_s=1))
    assert names(events) == ["turn.started", "message.stored", "done"]


def test_late_subscriber_starts_at_the_latest_run():
    bus = EventBus()
    for _ in range(2):
        bus.publish("s", "turn.started")
        bus.publish("s", "done")
    events = list(bus.subscribe("s", max_wait_s=1))
    assert [event.id for event in events] == [3, 4]


def test_last_event_id_replays_only_what_was_missed():
    bus = EventBus()
    ids = [bus.publish("s", name).id for name in ("turn.started", "provider.request", "provider.response", "done")]
    assert [event.id for event in bus.subscribe("s", ids[1], max_wait_s=1)] == ids[2:]


def test_buffer_is_bounded():
    bus = EventBus(buffer_size=3)
    for number in range(10):
        bus.publish("s", "tick", {"n": number})
    assert [event.data["n"] for event in bus.subscribe("s", 0, max_wait_s=0.05) if event] == [7, 8, 9]


def test_live_subscriber_receives_events_published_later():
    bus = EventBus()
    received = []

    def listen():
        received.extend(bus.subscribe("s", 0, max_wait_s=5))

    thread = threading.Thread(target=listen)
    thread.start()
    time.sleep(0.05)
    bus.publish("s", "turn.started")
    bus.publish("s", "done")
    thread.join(timeout=5)
    assert names(received) == ["turn.started", "done"]


def test_heartbeat_is_signalled_when_idle():
    bus = EventBus(heartbeat_s=0.05)
    stream = bus.subscribe("s", 0, max_wait_s=1)
    assert next(stream) is None


def test_non_final_error_does_not_close_the_stream():
    bus = EventBus()
    bus.publish("s", "job.started")
    bus.publish("s", "error", {"code": "draft_invalid", "final": False})
    bus.publish("s", "done")
    assert names(bus.subscribe("s", 0, max_wait_s=1)) == ["job.started", "error", "done"]


@pytest.mark.parametrize("key", ["prompt", "content", "reply", "reference_solution", "tests", "messages"])
def test_private_keys_are_refused(key):
    with pytest.raises(PrivatePayloadError):
        EventBus().publish("s", "provider.response", {key: "secret"})


def test_done_carries_the_turn_answer():
    event = EventBus().publish("s", "done", {"reply": "hello", "messages": []})
    assert event.data == {"reply": "hello", "messages": []}


def test_heartbeats_take_an_id_but_are_never_replayed():
    bus = EventBus()
    bus.publish("s", "turn.started")
    beat = bus.heartbeat("s")
    later = bus.publish("s", "done")
    assert beat.id == 2 and later.id == 3
    assert names(bus.subscribe("s", 0, max_wait_s=1)) == ["turn.started", "done"]
