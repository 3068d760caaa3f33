"""A failing model, handled for the user (issue 33 part 5): a turn against `FakeLLMServer` on
loopback, through the app's `/chat`, streamed or not.

- the wait for a first token is bounded per turn (`LLM_WAIT_S`), across the retry and the
  fallbacks, and said while it lasts (`provider.waiting`);
- one turn's faults count once for the breaker: another user's turn is still called;
- the error a user reads says what happened in their words (`details.reason`), and the
  operator's detail (settings, `make demo`, addresses) goes to the log only;
- a stored answer names the model that wrote it (`meta.answered_by`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from api.services import services_of
from testing.fake_llm import FakeLLMServer
from testing.ports import free_port
from tests.conftest import new_token

HANG_S = 30.0
OPERATOR_WORDS = ("LLM_", "make demo", "http://", "127.0.0.1", "PROVIDER_", "SCRIPTED_", "ollama serve")


@pytest.fixture
def hung() -> Iterator[FakeLLMServer]:
    """A model that sends its headers and then nothing."""
    with FakeLLMServer(hang_after_headers=True, hang_s=HANG_S) as server:
        yield server


def auth(app: Flask, name: str = "alice") -> dict[str, str]:
    return {"Authorization": f"Bearer {new_token(app, name)}"}


def streamed(app: Flask, headers: dict[str, str], message: str = "hello") -> list[dict[str, Any]]:
    from tests.live.test_streams import STREAM, parse

    response = app.test_client().post("/chat", json={"message": message}, headers={**headers, **STREAM})
    return parse(response.get_data(as_text=True))


def named(frames: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [frame["data"] for frame in frames if frame["event"] == name]


def assert_users_words(error: dict[str, Any]) -> None:
    for word in OPERATOR_WORDS:
        assert word not in error["message"], error["message"]


def test_headers_then_silence_waits_llm_wait_s_in_all_then_says_the_model_is_not_answering(
    make_app: Any, hung: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    """2 providers x 2 attempts x LLM_TIMEOUT_S would be 4 calls (8 s); the turn's wait (3.5 s)
    allows the primary's whole deadline (2 s) and the fallback the rest, and no retry."""
    app = make_app(
        llm_base_url=hung.openai_base_url,
        llm_fallbacks="openai:second",
        llm_timeout_s=2,
        llm_wait_s=3.5,
    )
    with caplog.at_level(logging.WARNING):
        frames = streamed(app, auth(app))
    assert frames[-1]["event"] == "error"
    error = frames[-1]["data"]["error"]
    assert error["code"] == "provider_unavailable" and error["details"] == {"reason": "not_answering"}
    assert error["message"].startswith("The model is not answering")
    assert_users_words(error)
    assert [body["model"] for body in hung.requests] == ["test-model", "second"]  # no retry: the wait is used up
    assert [data["attempt"] for data in named(frames, "provider.request")] == [1]
    waiting = named(frames, "provider.waiting")
    assert waiting, "nothing said while the model was waited for"
    assert {(data["provider"], data["model"]) for data in waiting} == {("openai", "test-model"), ("openai", "second")}
    first = [data["waited_s"] for data in waiting if data["model"] == "test-model"]
    assert first == sorted(first) and first[0] >= 1  # counting up, whole seconds
    assert all(set(data) == {"turn_id", "pass", "attempt", "provider", "model", "waited_s"} for data in waiting)
    turn_log = [record.getMessage() for record in caplog.records if "no provider answered" in record.getMessage()]
    assert turn_log and "LLM_TIMEOUT_S" in turn_log[0]  # the operator's words are in the log


def test_one_users_http_500_never_refuses_another_users_turn(make_app: Any, fake_llm: FakeLLMServer) -> None:
    app = make_app(llm_base_url=fake_llm.openai_base_url, provider_breaker_failures=2)
    fake_llm.when("broken", 500)
    first = app.test_client().post("/chat", json={"message": "broken please"}, headers=auth(app))
    assert first.status_code == 502
    error = first.get_json()["error"]
    assert error["details"] == {"reason": "overloaded"} and error["message"].startswith("The model is overloaded")
    assert_users_words(error)
    assert len(fake_llm.requests) == 2  # the call and its one retry (SPEC 6.4)
    states = services_of(app).turns.chat.breaker_states()
    assert states is not None and (states[0].state, states[0].failures) == ("closed", 1)  # one turn, counted once
    other = app.test_client().post("/chat", json={"message": "hello"}, headers=auth(app, "bob"))
    assert other.status_code == 200 and other.get_json()["reply"] == "ok"


def test_a_stopped_model_cannot_be_reached_also_once_its_circuit_is_open(make_app: Any) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there: connection refused
    app = make_app(llm_base_url=closed, provider_breaker_failures=1)
    headers = auth(app)
    for _ in range(2):  # the second turn finds the circuit open and calls nothing
        response = app.test_client().post("/chat", json={"message": "hello"}, headers=headers)
        assert response.status_code == 502
        error = response.get_json()["error"]
        assert error["details"] == {"reason": "unreachable"}, error
        assert error["message"].startswith("The model cannot be reached")
        assert "circuit" not in error["message"]
        assert_users_words(error)
    states = services_of(app).turns.chat.breaker_states()
    assert states is not None and states[0].state == "open"


def test_a_stored_answer_names_the_model_that_wrote_it(make_app: Any, fake_llm: FakeLLMServer) -> None:
    app = make_app(llm_base_url=fake_llm.openai_base_url)
    answer = app.test_client().post("/chat", json={"message": "hello"}, headers=auth(app)).get_json()
    stored = answer["messages"][-1]
    assert stored["role"] == "assistant"
    assert stored["meta"]["answered_by"] == {"provider": "openai", "model": "test-model"}


def test_health_and_the_banner_follow_the_turns_calls(make_app: Any, fake_llm: FakeLLMServer) -> None:
    app = make_app(llm_base_url=fake_llm.openai_base_url)
    fake_llm.queue(500, 500)
    app.test_client().post("/chat", json={"message": "hello"}, headers=auth(app))
    entry = app.test_client().get("/health").get_json()["provider"]["chain"][0]
    assert entry["ok"] is False  # the model list answers, but the turn's calls just failed
    assert entry["last_failure"]["failure"] == "server_error" and entry["last_failure"]["status_code"] == 500
    assert "LLM_" in entry["hint"]
    bob = auth(app, "bob")
    assert app.test_client().get("/api/status", headers=bob).get_json()["model"]["ok"] is False
    app.test_client().post("/chat", json={"message": "hello"}, headers=bob)
    assert app.test_client().get("/api/status", headers=bob).get_json()["model"]["ok"] is True  # at once
