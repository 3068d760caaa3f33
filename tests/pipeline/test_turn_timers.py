"""A turn under the provider timers (SPEC 7a.1, 7a.4, 6.4), against `FakeLLMServer` on loopback.

A long answer that keeps streaming is shown and stored whole, with no retry and nothing
counted against the provider; a server that stalls mid-answer is cut by `LLM_IDLE_TIMEOUT_S`,
reset and retried once; the 502 a user finally gets says what happened in the user's words, while the log says which timer or status ended it and what to do
about it. Assertions read events, the fake's log, the server's log and the breaker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from api.services import services_of
from foundation.cancellation import CancelToken
from pipeline.passes import provider_pass
from providers import BreakerPolicy, ChatMessage, FailureKind, FallbackChain, ProviderConfig, build_chain
from testing.fake_llm import FakeLLMServer, StreamReply
from tests.conftest import new_token

CONTEXT = [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="tell me a story")]
LONG = tuple(f"word{i} " for i in range(15))  # 15 pieces 0.1 s apart: three times a 0.5 s first-token deadline
HANG_S = 30.0


@pytest.fixture
def fake() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(hang_s=HANG_S) as server:
        yield server


class Events:
    def __init__(self) -> None:
        self.log: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, data: dict[str, Any]) -> None:
        self.log.append((name, data))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [data for event, data in self.log if event == name]


def chain_for(fake: FakeLLMServer, *, timeout_s: float, idle_timeout_s: float) -> FallbackChain:
    config = ProviderConfig(
        provider="openai",
        base_url=fake.openai_base_url,
        model="m",
        timeout_s=timeout_s,
        idle_timeout_s=idle_timeout_s,
    )
    return build_chain(config, breaker=BreakerPolicy(failures=1, cooldown_s=60))


def run_pass(chain: FallbackChain, events: Events, cancel: CancelToken | None = None) -> Any:
    return provider_pass(
        chain, CONTEXT, events, cancel or CancelToken(), lambda name: False, pass_index=0, last_pass=True
    )


# --- one pass ---------------------------------------------------------------------------------------


def test_a_long_answer_is_shown_whole_without_a_retry_or_a_reset(fake: FakeLLMServer) -> None:
    chain = chain_for(fake, timeout_s=0.5, idle_timeout_s=0.5)
    for _ in range(2):
        fake.queue(StreamReply(LONG, delay_s=0.1))
        events = Events()
        outcome = run_pass(chain, events)
        assert outcome.reply == "".join(LONG) and not outcome.stopped
        assert "".join(d["text"] for d in events.named("answer.delta")) == outcome.reply
        assert [d["attempt"] for d in events.named("provider.request")] == [1]
        assert events.named("answer.reset") == []
        assert [d["ok"] for d in events.named("provider.response")] == [True]
    assert len(fake.requests) == 2
    states = chain.breaker_states()
    assert states is not None and (states[0].state, states[0].failures) == ("closed", 0)


def test_a_stall_mid_answer_is_reset_and_retried_once(fake: FakeLLMServer) -> None:
    fake.queue(StreamReply(("Once upon ",), hang=True), StreamReply(("Once upon ", "a time.")))
    chain = build_chain(
        ProviderConfig(provider="openai", base_url=fake.openai_base_url, model="m", timeout_s=30, idle_timeout_s=0.5)
    )
    events = Events()
    outcome = run_pass(chain, events)
    assert outcome.reply == "Once upon a time."
    first, second = events.named("provider.response")
    assert (first["failure"], first["ok"], second["ok"]) == (FailureKind.IDLE_TIMEOUT, False, True)
    assert first["elapsed_ms"] < 20_000  # the idle timer ended it, not the 30 s deadline
    shown = [data["text"] if name == "answer.delta" else "|reset|" for name, data in events.log if "answer" in name]
    assert "".join(shown) == "Once upon |reset|Once upon a time."  # the deltas after the reset are the answer
    assert fake.answer(0).client_hung_up


def test_stop_during_a_long_answer_ends_the_pass_at_once(fake: FakeLLMServer) -> None:
    fake.queue(StreamReply(tuple(f"w{i} " for i in range(300)), delay_s=0.1))  # 30 s of answer
    chain = chain_for(fake, timeout_s=0.5, idle_timeout_s=30)
    token = CancelToken()
    threading.Timer(0.8, token.cancel).start()
    events = Events()
    outcome = run_pass(chain, events, token)
    assert outcome.stopped and outcome.completion.failure is FailureKind.CANCELLED
    assert outcome.gate.shown.startswith("w0 w1 ")  # what was shown is what the turn keeps (7a.5)
    assert len(events.named("provider.request")) == 1  # a cancel is never retried
    answer = fake.answer()
    assert answer.client_hung_up and not answer.completed
    states = chain.breaker_states()
    assert states is not None and states[0].failures == 0


# --- a whole turn: the 502 says what happened -------------------------------------------------------


def chat(app: Flask, message: str = "hello") -> Any:
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    return app.test_client().post("/chat", json={"message": message}, headers=auth)


def breaker(app: Flask) -> tuple[str, int]:
    states = services_of(app).turns.chat.breaker_states()
    assert states is not None
    return states[0].state, states[0].failures


def test_a_long_answer_through_chat(make_app: Any, fake: FakeLLMServer) -> None:
    app = make_app(llm_base_url=fake.openai_base_url, llm_timeout_s=0.5, llm_idle_timeout_s=0.5)
    fake.queue(StreamReply(LONG, delay_s=0.1))
    response = chat(app)
    assert response.status_code == 200 and response.get_json()["reply"] == "".join(LONG)
    assert len(fake.requests) == 1 and breaker(app) == ("closed", 0)


def operator_log(caplog: pytest.LogCaptureFixture) -> str:
    """The log line of a failed turn: what an operator reads (the user reads plain words)."""
    lines = [record.getMessage() for record in caplog.records if "no provider answered" in record.getMessage()]
    assert len(lines) == 1, lines
    return lines[0]


def test_the_idle_timeout_is_named_in_the_log(
    make_app: Any, fake: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(llm_base_url=fake.openai_base_url, llm_timeout_s=30, llm_idle_timeout_s=0.5)
    fake.queue(StreamReply(("Hel",), hang=True), StreamReply(("Hel",), hang=True))
    with caplog.at_level(logging.WARNING):
        response = chat(app)
    assert response.status_code == 502
    error = response.get_json()["error"]
    assert error["code"] == "provider_unavailable" and error["details"] == {"reason": "not_answering"}
    assert error["message"].startswith("The model is not answering right now. Your message was kept")
    assert "LLM_" not in error["message"]
    logged = operator_log(caplog)
    assert "the model started answering, then sent nothing for 0.5 s (LLM_IDLE_TIMEOUT_S)" in logged
    assert "raise LLM_IDLE_TIMEOUT_S" in logged
    assert len(fake.requests) == 2 and breaker(app) == ("closed", 1)  # one turn: one fault for the breaker


def test_the_first_token_timeout_is_named_in_the_log(make_app: Any, caplog: pytest.LogCaptureFixture) -> None:
    with FakeLLMServer(delay_s=30) as slow:
        app = make_app(llm_base_url=slow.openai_base_url, llm_timeout_s=0.5)
        with caplog.at_level(logging.WARNING):
            response = chat(app)
        assert response.status_code == 502
        assert response.get_json()["error"]["details"] == {"reason": "not_answering"}
        logged = operator_log(caplog)
        assert "the model did not start answering within 0.5 s (LLM_TIMEOUT_S) (openai/test-model: timeout" in logged
        assert "raise LLM_TIMEOUT_S (a cold CPU model may need minutes" in logged
        assert breaker(app) == ("closed", 1)


def test_a_refused_request_is_said_and_never_counted(
    make_app: Any, fake: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(llm_base_url=fake.openai_base_url, provider_breaker_failures=1)
    fake.queue(400, 400)
    with caplog.at_level(logging.WARNING):
        response = chat(app)
    assert response.status_code == 502
    error = response.get_json()["error"]
    assert error["details"] == {"reason": "refused"} and error["message"].startswith("The model refused the request")
    logged = operator_log(caplog)
    assert "the provider refused our request (HTTP 400) (openai/test-model: client_error" in logged
    assert "LLM_MAX_TOKENS" in logged
    assert breaker(app) == ("closed", 0)


@pytest.mark.parametrize("wire", ["openai", "ollama"])
def test_llm_max_tokens_reaches_the_provider(make_app: Any, fake: FakeLLMServer, wire: str) -> None:
    base = fake.ollama_base_url if wire == "ollama" else fake.openai_base_url
    app = make_app(llm_provider=wire, llm_base_url=base, llm_max_tokens=77)
    assert chat(app).status_code == 200
    body = fake.requests[0]
    assert (body["options"] == {"num_predict": 77}) if wire == "ollama" else (body["max_tokens"] == 77)
