"""PostgreSQL trouble over HTTP (SPEC 12): a lock held past `lock_timeout`, or the app's
connections terminated by the server, is a 503 with a stable code or a turn's terminal `error`
event, never a 500; nothing stored before is lost, and once the trouble is over everything
works again. Real PostgreSQL (tests/pg_support.py), the app's real routes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from testing.fake_llm import FakeLLMServer
from tests.conftest import new_token

STABLE_CODES = {"storage_unavailable", "storage_busy"}


@pytest.fixture
def pg_app(pg_url: str, make_app: Any, fake_llm: FakeLLMServer) -> Flask:
    app: Flask = make_app(llm_base_url=fake_llm.openai_base_url, database_url=pg_url, database_pool_size=3)
    return app


@pytest.fixture
def auth(pg_app: Flask) -> dict[str, str]:
    return {"Authorization": f"Bearer {new_token(pg_app)}"}


def sse_events(body: str) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    for frame in body.split("\n\n"):
        name, data = "message", ""
        for line in frame.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
        if data:
            events.append((name, json.loads(data)))
    return events


def assert_clean_failure(response: Any) -> None:
    """503 with a stable code (or a success: the trouble may have missed this request)."""
    assert response.status_code in (200, 201, 503), (response.status_code, response.get_data(as_text=True))
    if response.status_code == 503:
        assert response.get_json()["error"]["code"] in STABLE_CODES, response.get_json()


def assert_streamed_failure(response: Any, *, done_is_fine: bool = False) -> None:
    """A stream that ends with a terminal `error` event of a stable code (or `done`), or a 503
    answered before the stream began (the session could not even be read)."""
    if response.status_code == 503:
        assert response.get_json()["error"]["code"] in STABLE_CODES, response.get_json()
        return
    assert response.status_code == 200, (response.status_code, response.get_data(as_text=True))
    events = sse_events(response.get_data(as_text=True))
    assert events, response.get_data(as_text=True)
    name, data = events[-1]
    if name == "done" and done_is_fine:
        return
    assert name == "error" and data["error"]["code"] in STABLE_CODES, events[-1]


def held_locks(pg_url: str, tables: str) -> Iterator[psycopg.Connection[Any]]:
    conn = psycopg.connect(pg_url)
    conn.execute(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE")
    try:
        yield conn
    finally:
        conn.rollback()
        conn.close()


def test_a_held_lock_is_a_503_or_a_terminal_error_never_a_500(
    pg_app: Flask, auth: dict[str, str], pg_url: str, fake_llm: FakeLLMServer
) -> None:
    client: FlaskClient = pg_app.test_client()
    fake_llm.queue("first answer")
    first = client.post("/chat", json={"message": "remember this"}, headers=auth)
    assert first.status_code == 200, first.get_json()
    session_id = first.get_json()["session_id"]

    locker = held_locks(pg_url, "chat_messages")  # the session is read; the turn's history read waits
    next(locker)
    try:
        plain = client.post("/chat", json={"message": "and now?", "session_id": session_id}, headers=auth)
        assert plain.status_code == 503, plain.get_json()
        assert plain.get_json()["error"]["code"] in STABLE_CODES
        streamed = client.post(
            "/chat",
            json={"message": "and now?", "session_id": session_id},
            headers={**auth, "Accept": "text/event-stream"},
        )
        assert_streamed_failure(streamed)
        listed = client.get(f"/sessions/{session_id}/messages", headers=auth)
        assert listed.status_code == 503 and listed.get_json()["error"]["code"] in STABLE_CODES
    finally:
        next(locker, None)
    locker = held_locks(pg_url, "sessions")
    next(locker)
    try:
        created = client.post("/sessions", json={}, headers=auth)
        assert created.status_code == 503 and created.get_json()["error"]["code"] in STABLE_CODES
    finally:
        next(locker, None)

    fake_llm.queue("second answer")
    again = client.post("/chat", json={"message": "and now?", "session_id": session_id}, headers=auth)
    assert again.status_code == 200, again.get_json()
    contents = [
        m["content"] for m in client.get(f"/sessions/{session_id}/messages", headers=auth).get_json()["messages"]
    ]
    assert contents[:2] == ["remember this", "first answer"] and contents[-1] == "second answer"
    assert client.post("/sessions", json={}, headers=auth).status_code in (200, 201)


def test_terminated_connections_are_a_503_or_a_terminal_error_never_a_500(
    pg_app: Flask, auth: dict[str, str], pg_url: str, fake_llm: FakeLLMServer
) -> None:
    """The server terminates every connection of the app (as an operator's
    pg_terminate_backend, or a restart, does) between and during requests."""
    client: FlaskClient = pg_app.test_client()
    fake_llm.queue("first answer")
    first = client.post("/chat", json={"message": "remember this"}, headers=auth)
    session_id = first.get_json()["session_id"]

    def terminate() -> None:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )

    for _ in range(3):
        terminate()
        fake_llm.queue("an answer")
        assert_clean_failure(client.post("/chat", json={"message": "q", "session_id": session_id}, headers=auth))
        terminate()
        fake_llm.queue("an answer")
        streamed = client.post(
            "/chat", json={"message": "q", "session_id": session_id}, headers={**auth, "Accept": "text/event-stream"}
        )
        assert_streamed_failure(streamed, done_is_fine=True)
        terminate()
        assert_clean_failure(client.get(f"/sessions/{session_id}/messages", headers=auth))
        terminate()
        assert_clean_failure(client.post("/sessions", json={}, headers=auth))

    fake_llm.queue("last answer")
    last = client.post("/chat", json={"message": "still there?", "session_id": session_id}, headers=auth)
    assert last.status_code == 200, last.get_json()
    contents = [
        m["content"] for m in client.get(f"/sessions/{session_id}/messages", headers=auth).get_json()["messages"]
    ]
    assert contents[:2] == ["remember this", "first answer"] and contents[-1] == "last answer"
