"""SSE: `POST /chat` streamed, `/sessions/<id>/generate/stream` with replay, `/trace` behind a flag."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from events.bus import EventBus
from tests.conftest import new_token

STREAM = {"Accept": "text/event-stream"}


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


def test_streamed_tool_turn_events_in_order_ending_with_done(client, auth, fake_llm):
    fake_llm.queue("/remember likes the sea", "Saved.")
    frames = stream_chat(client, auth, "remember the sea")
    names = [frame["event"] for frame in frames]
    assert names == [
        "turn.started", "message.stored",
        "provider.request", "provider.response", "command.detected", "tool.started", "tool.finished", "message.stored",
        "provider.request", "provider.response", "message.stored", "done",
    ]
    ids = [frame["id"] for frame in frames]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert [f["data"]["role"] for f in frames if f["event"] == "message.stored"] == ["user", "memory_tools", "assistant"]
    finished = next(f for f in frames if f["event"] == "tool.finished")["data"]
    assert finished["ok"] is True and finished["code"] is None and finished["duration_ms"] >= 0
    done = frames[-1]["data"]
    assert set(done) == {"session_id", "reply", "messages", "tool"}
    assert done["reply"] == "Saved." and done["tool"] == {"name": "remember", "ok": True}


def test_no_event_but_done_carries_prompt_or_model_text(make_app, fake_llm, tmp_path):
    persona = tmp_path / "persona.txt"
    persona.write_text("PERSONA-MARKER-7731 you are a test.", encoding="utf-8")
    app = make_app(llm_base_url=fake_llm.openai_base_url, system_prompt_file=str(persona))
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    fake_llm.queue("/memory_search RAW-COMMAND-MARKER", "ANSWER-MARKER-5512")
    frames = stream_chat(app.test_client(), auth, "USER-MARKER-9")
    for frame in frames:
        text = json.dumps(frame["data"])
        assert "PERSONA-MARKER" not in text
        if frame["event"] != "done":
            assert "ANSWER-MARKER" not in text and "RAW-COMMAND-MARKER" not in text and "USER-MARKER" not in text


def test_streamed_provider_failure_ends_with_error_event(client, auth, fake_llm):
    fake_llm.queue(None, None)
    frames = stream_chat(client, auth, "hello?")
    assert frames[-1]["event"] == "error"
    error = frames[-1]["data"]
    assert error["error"]["code"] == "provider_unavailable" and error["status"] == 502
    assert isinstance(error["user_message_id"], int)


def test_late_subscriber_gets_the_finished_turn_and_the_stream_closes(client, auth, fake_llm):
    fake_llm.queue("hi there")
    session_id = client.post("/chat", json={"message": "hello"}, headers=auth).get_json()["session_id"]
    response = client.get(f"/sessions/{session_id}/generate/stream", headers=auth)
    frames = parse(response.get_data(as_text=True))
    assert [f["event"] for f in frames][0] == "turn.started"
    assert frames[-1]["event"] == "done" and frames[-1]["data"]["reply"] == "hi there"


def test_last_event_id_replays_only_missed_events(client, auth, fake_llm):
    fake_llm.queue("one")
    session_id = client.post("/chat", json={"message": "hello"}, headers=auth).get_json()["session_id"]
    everything = parse(client.get(f"/sessions/{session_id}/generate/stream", headers=auth).get_data(as_text=True))
    cut = everything[2]["id"]
    rest = parse(client.get(f"/sessions/{session_id}/generate/stream",
                            headers={**auth, "Last-Event-ID": str(cut)}).get_data(as_text=True))
    assert [f["id"] for f in rest] == [f["id"] for f in everything if f["id"] > cut]


def test_live_subscriber_in_another_tab_sees_the_turn(app, client, auth, fake_llm):
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    received: list[str] = []

    def watch() -> None:
        response = app.test_client().get(f"/sessions/{session_id}/generate/stream", headers=auth)
        received.append(response.get_data(as_text=True))

    watcher = threading.Thread(target=watch)
    watcher.start()
    time.sleep(0.2)
    fake_llm.queue("live answer")
    client.post("/chat", json={"message": "hi", "session_id": session_id}, headers=auth)
    watcher.join(timeout=10)
    frames = parse(received[0])
    assert frames[0]["event"] == "turn.started" and frames[-1]["data"]["reply"] == "live answer"


def test_heartbeats_while_idle(app, client, auth):
    app.extensions["events"] = EventBus(heartbeat_s=0.05)
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    response = client.get(f"/sessions/{session_id}/generate/stream", headers=auth, buffered=False)
    chunks = iter(response.response)
    seen = [next(chunks) for _ in range(3)]
    response.close()
    text = "".join(chunk.decode() if isinstance(chunk, bytes) else chunk for chunk in seen)
    beats = [frame for frame in parse(text) if frame["event"] == "heartbeat"]
    assert len(beats) == 2 and beats[1]["id"] > beats[0]["id"]


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
