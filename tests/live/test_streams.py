"""Live turns over HTTP (SPEC 4, 7, 7a), through the WSGI path (Flask's test client).

`POST /chat` streamed ends with its own turn's `done`; every event carries `turn_id`;
answers arrive as `answer.delta`; one turn at a time per session (409); `active_turn`;
cancel keeps the shown text with `meta.stopped`; `/generate/stream` follows the active
turn, replays after `Last-Event-ID`, replays the last end when idle; any failure (the
database included) ends with a terminal `error` carrying `user_message_id`.
The asyncio server's side of the same contract is in tests/serving/test_live_server.py.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from typing import Any

import pytest

from api.services import services_of
from testing.fake_llm import StreamReply
from testing.waiting import HUNG_S, wait_until
from tests.conftest import new_token

STREAM = {"Accept": "text/event-stream"}
ANSWERED_BY = {"provider": "openai", "model": "test-model"}  # `meta.answered_by` of a stored answer


@pytest.fixture(params=["memory", "redis"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def base_settings(base_settings: dict[str, Any], backend: str, request) -> dict[str, Any]:
    """Every test here runs on both backends of live turns: in-process, and Redis (REDIS_URL
    on a real private redis-server, emptied per test; tests/redis_support.py)."""
    if backend == "redis":
        return {**base_settings, "redis_url": request.getfixturevalue("redis_url"), "redis_turn_lease_s": 5}
    return base_settings


def parse(raw: str) -> list[dict[str, Any]]:
    """SSE frames -> [{"id", "event", "data"}], ignoring comments and `retry:`."""
    frames = []
    for block in raw.strip().split("\n\n"):
        fields: dict[str, Any] = {}
        for line in block.splitlines():
            key, _, value = line.partition(": ")
            if key in ("id", "event", "data"):
                fields[key] = value
        if "event" in fields:
            fields["id"] = int(fields["id"])
            fields["data"] = json.loads(fields["data"])
            frames.append(fields)
    return frames


def stream_chat(client, auth, message: str, **extra: Any) -> list[dict[str, Any]]:
    response = client.post("/chat", json={"message": message, **extra}, headers={**auth, **STREAM})
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    return parse(response.get_data(as_text=True))


def deltas_after_last_reset(frames: list[dict[str, Any]]) -> str:
    text = ""
    for frame in frames:
        if frame["event"] == "answer.reset":
            text = ""
        elif frame["event"] == "answer.delta":
            text += frame["data"]["text"]
    return text


def wait_for(predicate, timeout: float = HUNG_S) -> None:
    wait_until(predicate, "condition not reached", timeout)


def test_streamed_tool_turn_events_in_order_ending_with_done(client, auth, fake_llm):
    fake_llm.queue("/remember likes the sea", StreamReply(pieces=("Sa", "ved", "."), delay_s=0.05))
    frames = stream_chat(client, auth, "remember the sea")
    names = [frame["event"] for frame in frames]
    assert names == [
        "turn.started",
        "message.stored",
        "provider.request",
        "provider.response",
        "command.detected",
        "tool.started",
        "tool.finished",
        "message.stored",
        "provider.request",
        "answer.delta",
        "answer.delta",
        "answer.delta",
        "provider.response",
        "message.stored",
        "done",
    ]  # each piece is published as it arrives (the fake waits 50 ms between pieces)
    ids = [frame["id"] for frame in frames]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    turn_id = frames[-1]["data"]["turn_id"]
    assert turn_id.startswith("turn_") and all(frame["data"]["turn_id"] == turn_id for frame in frames)
    assert [f["data"]["role"] for f in frames if f["event"] == "message.stored"] == [
        "user",
        "memory_tools",
        "assistant",
    ]
    done = frames[-1]["data"]
    assert set(done) == {"turn_id", "session_id", "reply", "messages", "tool", "stopped"}
    assert done["reply"] == "Saved." == deltas_after_last_reset(frames) and done["stopped"] is False
    assert done["tool"] == {"name": "remember", "ok": True}


def test_json_answer_carries_the_turn_id(client, auth, fake_llm):
    fake_llm.queue("hello")
    body = client.post("/chat", json={"message": "hi"}, headers=auth).get_json()
    assert body["turn_id"].startswith("turn_") and body["stopped"] is False and body["reply"] == "hello"


def test_no_event_carries_prompt_command_or_user_text(make_app, fake_llm, tmp_path):
    """Only `answer.delta` (the answer itself) and `done` carry text; a command reply never."""
    persona = tmp_path / "persona.txt"
    persona.write_text("PERSONA-MARKER-7731 you are a test.", encoding="utf-8")
    app = make_app(llm_base_url=fake_llm.openai_base_url, system_prompt_file=str(persona))
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    fake_llm.queue("/memory_search RAW-COMMAND-MARKER", "ANSWER-MARKER-5512")
    frames = stream_chat(app.test_client(), auth, "USER-MARKER-9")
    for frame in frames:
        text = json.dumps(frame["data"])
        assert "PERSONA-MARKER" not in text
        if frame["event"] not in ("done", "answer.delta"):
            assert "ANSWER-MARKER" not in text and "USER-MARKER" not in text
        if frame["event"] != "done":
            assert "RAW-COMMAND-MARKER" not in text
    assert deltas_after_last_reset(frames) == "ANSWER-MARKER-5512"


def test_streamed_provider_failure_ends_with_error_event(client, auth, fake_llm):
    fake_llm.queue(None, None)
    frames = stream_chat(client, auth, "hello?")
    assert frames[-1]["event"] == "error"
    error = frames[-1]["data"]
    assert error["error"]["code"] == "provider_unavailable" and error["status"] == 502
    assert isinstance(error["user_message_id"], int) and error["turn_id"].startswith("turn_")


def test_a_failure_after_deltas_resets_them_before_the_retry(client, auth, fake_llm):
    fake_llm.queue(StreamReply(pieces=("Half an ", "answer"), error_after=1), StreamReply(pieces=("Whole ", "answer")))
    frames = stream_chat(client, auth, "go")
    names = [f["event"] for f in frames]
    reset = len(names) - 1 - names[::-1].index("answer.reset")
    # a reader that follows the turn live sees the failed attempt's delta before the reset; one
    # that reads after the turn ended reads its compacted log (the text after the last reset
    # only, `live/redis_bus.py`): either way nothing of the retry comes before the reset
    before = "".join(f["data"]["text"] for f in frames[:reset] if f["event"] == "answer.delta")
    assert before in ("", "Half an ")
    assert frames[-1]["data"]["reply"] == "Whole answer" == deltas_after_last_reset(frames)


def test_body_less_command_closes_the_provider_stream_at_its_first_line(client, auth, fake_llm):
    fake_llm.queue(
        StreamReply(pieces=("/remember tea is good\n", "and then the model goes on", " and on"), delay_s=0.3), "Noted."
    )
    body = client.post("/chat", json={"message": "remember"}, headers=auth).get_json()
    assert [m["role"] for m in body["messages"]] == ["user", "memory_tools", "assistant"]
    first = fake_llm.answer(0)
    assert first.client_hung_up and not first.completed and first.pieces_sent < 3


def start_slow_turn(app, auth, fake_llm, session_id: str, pieces=("slow ", "answer ", "here")) -> threading.Thread:
    fake_llm.queue(StreamReply(pieces=pieces, delay_s=0.3))
    thread = threading.Thread(
        target=lambda: app.test_client().post("/chat", json={"message": "go", "session_id": session_id}, headers=auth)
    )
    thread.start()
    return thread


def active_turn(client, auth, session_id: str) -> dict[str, Any] | None:
    return client.get(f"/sessions/{session_id}", headers=auth).get_json()["active_turn"]


def test_one_turn_at_a_time_per_session_then_the_next_is_accepted(app, client, auth, fake_llm):
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    thread = start_slow_turn(app, auth, fake_llm, session_id)
    wait_for(lambda: active_turn(client, auth, session_id) is not None)
    running = active_turn(client, auth, session_id)
    assert set(running) >= {"turn_id", "started_at", "last_event_id"}
    busy = client.post("/chat", json={"message": "again", "session_id": session_id}, headers=auth)
    assert busy.status_code == 409
    assert busy.get_json()["error"]["code"] == "turn_in_progress" and busy.get_json()["turn_id"] == running["turn_id"]
    thread.join(10)
    assert active_turn(client, auth, session_id) is None
    fake_llm.queue("next")
    assert client.post("/chat", json={"message": "again", "session_id": session_id}, headers=auth).status_code == 200


def test_cancel_keeps_the_shown_text_marked_stopped(app, client, auth, fake_llm):
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    fake_llm.queue(StreamReply(pieces=("First part. ", "Second part. ", "Never sent."), delay_s=0.4))
    results: list[list[dict[str, Any]]] = []
    thread = threading.Thread(
        target=lambda: results.append(
            parse(
                app.test_client()
                .post("/chat", json={"message": "long", "session_id": session_id}, headers={**auth, **STREAM})
                .get_data(as_text=True)
            )
        )
    )
    thread.start()
    live = services_of(app).live
    wait_for(lambda: "First" in json.dumps([e.data for e in live.bus.read(session_id, 0).events]))
    turn = active_turn(client, auth, session_id)
    answer = client.post(f"/sessions/{session_id}/cancel", json={"turn_id": turn["turn_id"]}, headers=auth)
    assert answer.status_code == 200 and answer.get_json() == {"turn_id": turn["turn_id"], "cancelled": True}
    thread.join(10)
    frames = results[0]
    done = frames[-1]
    assert done["event"] == "done" and done["data"]["stopped"] is True
    shown = deltas_after_last_reset(frames)
    assert shown.startswith("First part.") and "Never sent" not in shown
    stored = done["data"]["messages"][-1]
    assert (
        stored["role"] == "assistant"
        and stored["content"] == shown
        and stored["meta"] == {"stopped": True, "stop_reason": "user", "answered_by": ANSWERED_BY}
    )
    again = client.post(f"/sessions/{session_id}/cancel", headers=auth)
    assert again.status_code == 409 and again.get_json()["error"]["code"] == "no_turn_in_progress"


def test_cancel_before_any_answer_stores_nothing_more(app, client, auth, fake_llm):
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    fake_llm.queue(StreamReply(pieces=("never shown",), delay_s=3.0))
    results: list[Any] = []
    thread = threading.Thread(
        target=lambda: results.append(
            app.test_client().post("/chat", json={"message": "slow", "session_id": session_id}, headers=auth).get_json()
        )
    )
    thread.start()
    wait_for(lambda: active_turn(client, auth, session_id) is not None)
    wait_for(lambda: len(fake_llm.requests) == 1)
    assert client.post(f"/sessions/{session_id}/cancel", headers=auth).status_code == 200
    thread.join(5)
    assert results[0]["stopped"] is True and results[0]["reply"] == ""
    assert [m["role"] for m in results[0]["messages"]] == ["user"]


def test_cancel_of_a_wrong_turn_id_or_foreign_session(app, client, auth, fake_llm):
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    thread = start_slow_turn(app, auth, fake_llm, session_id)
    wait_for(lambda: active_turn(client, auth, session_id) is not None)
    wrong = client.post(f"/sessions/{session_id}/cancel", json={"turn_id": "turn_nope"}, headers=auth)
    assert wrong.status_code == 409
    other = {"Authorization": f"Bearer {new_token(app, 'mallory')}"}
    assert client.post(f"/sessions/{session_id}/cancel", headers=other).status_code == 404
    thread.join(10)


def test_progress_stream_follows_the_active_turn_from_its_start(app, client, auth, fake_llm):
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    thread = start_slow_turn(app, auth, fake_llm, session_id)
    wait_for(lambda: active_turn(client, auth, session_id) is not None)
    frames = parse(client.get(f"/sessions/{session_id}/generate/stream", headers=auth).get_data(as_text=True))
    thread.join(10)
    assert frames[0]["event"] == "turn.started" and frames[-1]["event"] == "done"
    assert frames[-1]["data"]["reply"] == "slow answer here" == deltas_after_last_reset(frames)


def test_reconnect_with_last_event_id_gets_only_what_was_missed(app, client, auth, fake_llm):
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    thread = start_slow_turn(app, auth, fake_llm, session_id, pieces=("a", "b", "c", "d"))
    wait_for(lambda: active_turn(client, auth, session_id) is not None)
    response = client.get(f"/sessions/{session_id}/generate/stream", headers=auth, buffered=False)
    seen = ""
    for chunk in response.response:
        seen += chunk.decode() if isinstance(chunk, bytes) else chunk
        if "answer.delta" in seen:
            break
    response.close()  # the tab reloads: the turn goes on
    first = parse(seen)
    cut = first[-1]["id"]
    rest = parse(
        client.get(f"/sessions/{session_id}/generate/stream", headers={**auth, "Last-Event-ID": str(cut)}).get_data(
            as_text=True
        )
    )
    thread.join(10)
    assert all(frame["id"] > cut for frame in rest) and rest[-1]["event"] == "done"
    assert deltas_after_last_reset(first + rest) == "abcd" == rest[-1]["data"]["reply"]


def test_idle_session_replays_the_last_end_and_closes(client, auth, fake_llm):
    fake_llm.queue("hi there")
    session_id = client.post("/chat", json={"message": "hello"}, headers=auth).get_json()["session_id"]
    frames = parse(client.get(f"/sessions/{session_id}/generate/stream", headers=auth).get_data(as_text=True))
    assert [f["event"] for f in frames] == ["done"] and frames[0]["data"]["reply"] == "hi there"
    after = parse(
        client.get(
            f"/sessions/{session_id}/generate/stream", headers={**auth, "Last-Event-ID": str(frames[0]["id"])}
        ).get_data(as_text=True)
    )
    assert after == []


def test_unknown_turn_id_is_404(client, auth):
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    assert client.get(f"/sessions/{session_id}/generate/stream?turn_id=turn_nope", headers=auth).status_code == 404


def test_a_cursor_from_before_a_restart_misses_nothing_silently(make_app, fake_llm, base_settings, backend):
    """In-process, the restart lost the buffer: the client is told (`replay.gap`). In Redis the
    events outlived the app: everything after the cursor is replayed, with no gap (a Redis
    restart's own gap: tests/live/test_redis_live.py)."""
    app = make_app(llm_base_url=fake_llm.openai_base_url)
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    fake_llm.queue("before")
    client = app.test_client()
    session_id = client.post("/chat", json={"message": "x"}, headers=auth).get_json()["session_id"]
    old_id = parse(client.get(f"/sessions/{session_id}/generate/stream", headers=auth).get_data(as_text=True))[-1]["id"]
    restarted = make_app(llm_base_url=fake_llm.openai_base_url)  # same database and data dir: a restart
    fake_llm.queue("after")
    client = restarted.test_client()
    body = client.post("/chat", json={"message": "y", "session_id": session_id}, headers=auth).get_json()
    frames = parse(
        client.get(f"/sessions/{session_id}/generate/stream", headers={**auth, "Last-Event-ID": str(old_id)}).get_data(
            as_text=True
        )
    )
    if backend == "redis":
        assert frames[0]["event"] == "turn.started" and frames[0]["data"]["turn_id"] == body["turn_id"]
        assert "replay.gap" not in [frame["event"] for frame in frames]
    else:
        assert frames[0]["event"] == "replay.gap" and frames[0]["data"]["after"] == old_id
    assert all(frame["id"] > old_id for frame in frames)
    assert frames[-1]["event"] == "done" and frames[-1]["data"]["turn_id"] == body["turn_id"]


def test_heartbeats_while_a_turn_is_quiet(make_app, fake_llm):
    app = make_app(llm_base_url=fake_llm.openai_base_url, sse_heartbeat_s=0.05)
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    client = app.test_client()
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    thread = start_slow_turn(app, auth, fake_llm, session_id, pieces=("late",))
    wait_for(lambda: active_turn(client, auth, session_id) is not None)
    frames = parse(client.get(f"/sessions/{session_id}/generate/stream", headers=auth).get_data(as_text=True))
    thread.join(10)
    beats = [frame for frame in frames if frame["event"] == "heartbeat"]
    assert len(beats) >= 2 and beats[1]["id"] > beats[0]["id"] and frames[-1]["event"] == "done"


@pytest.mark.parametrize(
    "refusal", ["attempt to write a readonly database", "database or disk is full", "database is locked"]
)
def test_storage_failure_mid_turn_ends_with_an_error_naming_the_user_message(
    make_app, fake_llm, base_settings, refusal
):
    """The database engine refuses the assistant message (a trigger raises the error SQLite
    gives when read-only, full or locked): the stream still ends, with 503 and the user
    message's id, and nothing stored before is lost."""
    app = make_app(llm_base_url=fake_llm.openai_base_url)
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    client = app.test_client()
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    trigger = sqlite3.connect(base_settings["database_path"], isolation_level=None)
    trigger.execute(
        "CREATE TRIGGER refuse_answers BEFORE INSERT ON chat_messages WHEN NEW.role = 'assistant' "
        f"BEGIN SELECT RAISE(ABORT, '{refusal}'); END"
    )
    trigger.close()
    fake_llm.queue("an answer that cannot be stored")
    frames = stream_chat(client, auth, "hello", session_id=session_id)
    end = frames[-1]
    assert end["event"] == "error" and end["data"]["status"] == 503
    assert end["data"]["error"]["code"] == "storage_unavailable" and isinstance(end["data"]["user_message_id"], int)
    as_json = client.post("/chat", json={"message": "again", "session_id": session_id}, headers=auth)
    assert as_json.status_code == 503 and isinstance(as_json.get_json()["user_message_id"], int)
    stored = client.get(f"/sessions/{session_id}/messages", headers=auth).get_json()["messages"]
    assert [m["role"] for m in stored] == ["user", "user"]  # nothing already stored was lost


def test_streams_are_private_and_trace_is_flagged(app, client, auth, make_app, fake_llm):
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    other = {"Authorization": f"Bearer {new_token(app, 'eve')}"}
    assert client.get(f"/sessions/{session_id}/generate/stream", headers=other).status_code == 404
    assert client.get(f"/sessions/{session_id}/generate/stream").status_code == 401
    assert client.get(f"/sessions/{session_id}/trace", headers=auth).status_code == 404
    traced = make_app(llm_base_url=fake_llm.openai_base_url, trace_enabled=True)
    token = {"Authorization": f"Bearer {new_token(traced, 'tracy')}"}
    tclient = traced.test_client()
    sid = tclient.post("/sessions", json={}, headers=token).get_json()["id"]
    response = tclient.get(f"/sessions/{sid}/trace", headers=token, buffered=False)
    assert response.status_code == 200 and response.mimetype == "text/event-stream"
    response.close()


def test_retry_answers_the_stored_message_instead_of_storing_it_twice(client, auth, fake_llm):
    fake_llm.queue(None, None)
    failed = client.post("/chat", json={"message": "are you there?"}, headers=auth)
    assert failed.status_code == 502
    session_id, message_id = failed.get_json()["session_id"], failed.get_json()["user_message_id"]
    fake_llm.queue("Yes, now I am.")
    body = client.post(
        "/chat", json={"message": "are you there?", "session_id": session_id, "retry_of": message_id}, headers=auth
    ).get_json()
    assert body["reply"] == "Yes, now I am."
    assert [(m["id"], m["role"]) for m in body["messages"]][0] == (message_id, "user")
    stored = client.get(f"/sessions/{session_id}/messages", headers=auth).get_json()["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    again = client.post(
        "/chat", json={"message": "are you there?", "session_id": session_id, "retry_of": message_id}, headers=auth
    )
    assert again.status_code == 409 and again.get_json()["error"]["code"] == "not_retryable"  # answered now


@pytest.mark.parametrize("change", ["other_text", "no_session"])
def test_a_retry_must_name_the_same_unanswered_message(client, auth, fake_llm, change):
    fake_llm.queue(None, None)
    failed = client.post("/chat", json={"message": "hello?"}, headers=auth).get_json()
    body = {"message": "hello?", "session_id": failed["session_id"], "retry_of": failed["user_message_id"]}
    if change == "other_text":
        body["message"] = "something else"
    else:
        del body["session_id"]
    answer = client.post("/chat", json=body, headers=auth)
    assert answer.status_code == 400 and answer.get_json()["error"]["code"] == "invalid_request"
    active = client.post("/chat", json={"message": "next", "session_id": failed["session_id"]}, headers=auth)
    assert active.status_code in (200, 502)  # the refused retry left the session free
