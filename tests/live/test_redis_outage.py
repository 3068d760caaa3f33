"""Redis going away while a server serves (REDIS_URL; SPEC 12; issue 24.7).

A real server process (`python app.py`, the asyncio server) on the private redis-server
(tests/redis_support.py), which a test stops while streams are open: every stream ends with a
terminal `error` (`live_state_unavailable`, status 503) instead of being cut, a new turn or
stream answers 503 with that code, `/health/ready` says Redis is down, and once Redis is back
the server serves again. The readiness probe leaves no connection open once the app closes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import requests
from flask import Flask

from api.services import services_of
from testing.fake_llm import FakeLLMServer
from testing.waiting import wait_until
from tests.conftest import new_token
from tests.live_client import READ_S, Frame, Stream, chat, new_session, streamed_chat, wait_active
from tests.multiprocess_support import ServerProcess, server_env, start_server
from tests.process_support import free_port, stop_process
from tests.redis_support import RedisServer

pytestmark = pytest.mark.slow

CODE = "live_state_unavailable"


@pytest.fixture
def server(tmp_path: Path, redis_url: str, fake_llm: FakeLLMServer) -> Iterator[ServerProcess]:
    env = server_env(
        tmp_path,
        REDIS_URL=redis_url,
        LLM_PROVIDER="openai",
        LLM_BASE_URL=fake_llm.openai_base_url,
        LLM_MODEL="m",
        RATE_LIMITS="turns=off,sessions=off",
        HEALTH_CACHE_S="0",
    )
    started = start_server(tmp_path, "server", env, free_port())
    try:
        yield started
    finally:
        fake_llm.released.set()
        stop_process(started.process, started.log)


def follow(server: ServerProcess, session_id: str, turn_id: str) -> Stream:
    url = f"{server.base}/sessions/{session_id}/generate/stream?turn_id={turn_id}"
    headers = {**server.auth, "Accept": "text/event-stream"}
    return Stream(requests.get(url, headers=headers, stream=True, timeout=READ_S))


def ended_unavailable(frames: list[Frame], turn_id: str) -> None:
    end = frames[-1]
    assert end.name == "error", [f.name for f in frames]
    assert end.data["error"]["code"] == CODE and end.data["status"] == 503 and end.data["turn_id"] == turn_id


def test_open_streams_end_with_an_error_when_redis_goes_away_and_the_server_recovers(
    server: ServerProcess, redis_server: RedisServer, fake_llm: FakeLLMServer
) -> None:
    session_id = new_session(server.base, server.auth)
    fake_llm.released.clear()  # the turn waits on the model while Redis goes away
    posted = streamed_chat(server.base, server.auth, session_id, "hi")
    turn_id = str(wait_active(server.base, server.auth, session_id)["turn_id"])
    followers = [follow(server, session_id, turn_id) for _ in range(2)]
    for stream in (posted, *followers):
        stream.until("turn.started")

    redis_server.stop()
    try:
        for stream in (posted, *followers):
            ended_unavailable(stream.until("done", "error"), turn_id)
            with pytest.raises(StopIteration):  # and the stream is over
                next(stream._frames)
        refused = chat(server.base, server.auth, session_id, "while Redis is away")
        assert refused.status_code == 503 and refused.json()["error"]["code"] == CODE
        url = f"{server.base}/sessions/{session_id}/generate/stream"
        refused = requests.get(url, headers={**server.auth, "Accept": "text/event-stream"}, timeout=READ_S)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == CODE
        ready = requests.get(f"{server.base}/health/ready", timeout=READ_S)
        assert ready.status_code == 503 and ready.json()["error"]["code"] == "not_ready"
        assert ready.json()["error"]["details"]["checks"]["redis"]["ok"] is False
        health = requests.get(f"{server.base}/health", timeout=READ_S)  # SPEC 4's body names Redis too
        assert health.status_code == 503 and health.json()["redis"]["ok"] is False
    finally:
        redis_server.start()  # empty, as after a crash of a Redis without persistence
    fake_llm.released.set()

    answers: list[requests.Response] = []

    def served() -> bool:
        answers.append(chat(server.base, server.auth, session_id, "back?"))
        return answers[-1].status_code == 200

    wait_until(served, "the server never served again after Redis came back")
    assert answers[-1].json()["reply"]
    assert all(answer.status_code in (200, 409, 503) for answer in answers)
    assert requests.get(f"{server.base}/health/ready", timeout=READ_S).status_code == 200
    health = requests.get(f"{server.base}/health", timeout=READ_S)
    assert health.status_code == 200 and health.json()["redis"]["ok"] is True


def test_the_readiness_probe_leaves_no_connection_to_redis_open(
    make_app: Callable[..., Flask], fake_llm: FakeLLMServer, redis_url: str
) -> None:
    app = make_app(llm_base_url=fake_llm.openai_base_url, redis_url=redis_url, health_cache_s=0)
    client = app.test_client()
    for _ in range(3):
        assert client.get("/health/ready").status_code == 200
    services_of(app).live.close()
    admin = redis.Redis.from_url(redis_url)
    try:
        others = [c for c in admin.client_list() if c["id"] != str(admin.client_id())]
    finally:
        admin.close()
    assert others == []


def test_a_stream_served_from_a_request_thread_ends_with_the_error_too(
    make_app: Callable[..., Flask], fake_llm: FakeLLMServer, redis_url: str, redis_server: RedisServer
) -> None:
    """The blocking form (a plain WSGI server): the stream waits in `wait` when Redis goes; the
    listener's loss wakes it, it finds Redis away and ends with the same `error`."""
    app = make_app(llm_base_url=fake_llm.openai_base_url, redis_url=redis_url, sse_heartbeat_s=15)
    auth = {"Authorization": f"Bearer {new_token(app)}", "Accept": "text/event-stream"}
    client = app.test_client()
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    live = services_of(app).live
    lease = live.turns.claim(session_id, "chat", live.bus.position())
    live.bus.publish(session_id, "turn.started", {"turn_id": lease.turn_id})
    response = client.get(f"/sessions/{session_id}/generate/stream", headers=auth, buffered=False)
    chunks = iter(response.response)
    assert "turn.started" in "".join(str(next(chunks)) for _ in range(2))
    redis_server.stop()
    try:
        rest = "".join(chunk.decode() if isinstance(chunk, bytes) else chunk for chunk in chunks)
    finally:
        response.close()
        redis_server.start()
    assert "event: error" in rest and f'"code": "{CODE}"' in rest and f'"turn_id": "{lease.turn_id}"' in rest
