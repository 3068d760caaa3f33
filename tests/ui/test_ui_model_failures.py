"""A failing model, handled for the user (issue 33 part 5), in a real browser on the real server.

The model is `FakeLLMServer`, told per test how to fail: headers and then silence, HTTP 500,
a slow first token; a second server's model is a closed port (connection refused). Short
timers (`LLM_TIMEOUT_S=4`, `LLM_WAIT_S=5`) keep each wait a few seconds. What is asserted is
what the user sees, in the DOM: the waiting step counting up with the model's name, the error
in the user's words with Retry (and no operator detail), the banner coming with the failed turn
and going with the next answer, the model and time under an answer; and that one user's
failing turn does not get another user's turn refused (the breaker counts turns, not calls).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from playwright.sync_api import expect

from testing.fake_llm import FakeLLMServer
from tests.ui_support import click_topbar, free_port, log_in, require_chromium, rest, send, serve

pytestmark = [pytest.mark.browser]

OPERATOR_WORDS = ("LLM_", "make demo", "http://", "127.0.0.1", "PROVIDER_", "circuit", "Traceback")
TIMERS = {"LLM_TIMEOUT_S": "4", "LLM_WAIT_S": "5", "PROVIDER_RECHECK_S": "0", "PROVIDER_BREAKER_FAILURES": "2"}


@pytest.fixture(scope="module")
def model() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(hang_s=30) as server:
        yield server


@pytest.fixture(scope="module")
def failing_server(model: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require_chromium()
    with serve(model, tmp_path_factory.mktemp("ui-failing-model"), **TIMERS) as running:
        yield running


@pytest.fixture(scope="module")
def unreachable_server(model: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The model's address is a closed port: every call is refused."""
    require_chromium()
    closed = f"http://127.0.0.1:{free_port()}/v1"
    settings = {**TIMERS, "LLM_BASE_URL": closed, "PROVIDER_BREAKER_FAILURES": "1"}
    with serve(model, tmp_path_factory.mktemp("ui-unreachable-model"), **settings) as running:
        yield running


@pytest.fixture
def chat(page: Any, failing_server: dict[str, str], model: FakeLLMServer) -> Iterator[Any]:
    model.reset()
    log_in(page, failing_server)
    yield page
    model.reset()


def said_in_users_words(error: Any, reason: str, words: str) -> None:
    expect(error).to_have_attribute("data-reason", reason)
    expect(error).to_contain_text(words)
    text = error.inner_text()
    for operator_word in OPERATOR_WORDS:
        assert operator_word not in text, text
    expect(error.locator(".retry-button")).to_be_visible()


def test_headers_then_silence_shows_the_wait_then_the_error_and_the_banner_until_it_answers(
    chat: Any, model: FakeLLMServer
) -> None:
    model.hang_after_headers = True  # headers, then nothing
    send(chat, "hello?")
    step = chat.locator(".progress .step.waiting .step-text").first
    expect(step).to_have_text("Waiting for the model, 1 s… (fake on openai, pass 1)")
    expect(step).to_have_text("Waiting for the model, 2 s… (fake on openai, pass 1)")  # it counts on
    error = chat.locator(".turn-error")
    expect(error).to_be_visible(timeout=20_000)
    said_in_users_words(error, "not_answering", "The model is not answering.")
    assert len(model.requests) == 2  # the call, and a retry within what was left of LLM_WAIT_S
    banner = chat.locator("#model-banner")
    expect(banner).to_be_visible()  # the model list still answers: the failed turn is the evidence
    model.hang_after_headers = False
    error.locator(".retry-button").click()
    answer = chat.locator(".message.role-assistant")
    expect(answer).to_have_count(1)
    expect(banner).to_be_hidden()  # it answered: the banner goes at once
    expect(answer.locator("[data-testid=answered-by]")).to_contain_text("fake (openai)")


def test_a_slow_first_token_is_waited_for_with_the_count_shown(chat: Any, model: FakeLLMServer) -> None:
    model.delay_s = 3.4  # nothing at all (not even headers) for 3.4 s, then the answer
    send(chat, "take your time")
    step = chat.locator(".progress .step.waiting .step-text").first
    expect(step).to_have_text("Waiting for the model, 1 s… (fake on openai, pass 1)")
    expect(step).to_have_text("Waiting for the model, 2 s… (fake on openai, pass 1)")
    answer = chat.locator(".message.role-assistant")
    expect(answer).to_have_count(1)
    expect(answer).to_contain_text("ok")
    by = answer.locator("[data-testid=answered-by]")
    expect(by).to_contain_text("fake (openai) · ")
    assert by.locator("time").get_attribute("datetime")
    expect(chat.locator(".turn-error")).to_have_count(0)
    chat.reload()  # the line comes from the stored message, so it is there after a reload too
    expect(chat.locator(".message.role-assistant [data-testid=answered-by]")).to_contain_text("fake (openai)")


def test_an_http_500_is_said_and_another_users_turn_is_still_answered(
    chat: Any, model: FakeLLMServer, failing_server: dict[str, str]
) -> None:
    model.when("broken", 500)  # this user's message, and its retry, get a 500
    send(chat, "broken on purpose")
    error = chat.locator(".turn-error")
    expect(error).to_be_visible(timeout=20_000)
    said_in_users_words(error, "overloaded", "The model is overloaded.")
    # Two faults of one turn: with PROVIDER_BREAKER_FAILURES=2 counted per call, the circuit
    # would now be open and refuse everyone. It counts turns: the next user is answered.
    bob = rest(failing_server, "POST", "/api/admin/users", json={"name": "bob-500", "token": True})
    answered = requests.post(
        failing_server["base"] + "/chat",
        json={"message": "hello"},
        headers={"Authorization": f"Bearer {bob['token']}"},
        timeout=30,
    )
    assert answered.status_code == 200, answered.text
    assert answered.json()["reply"] == "ok"
    # the operator's details are on the admin page (not in the chat): what the failed call saw, the fix
    click_topbar(chat, "#admin-button")
    provider = chat.locator("#admin-model-list .model-item").first
    expect(provider).to_contain_text("fake (openai)")
    expect(provider).to_contain_text("server_error, HTTP 500")
    chat.keyboard.press("Escape")
    expect(chat.locator("#admin-dialog")).to_be_hidden()
    model.reset()
    error.locator(".retry-button").click()
    expect(chat.locator(".message.role-assistant")).to_have_count(1)


def test_a_stopped_model_cannot_be_reached_even_once_its_circuit_is_open(
    page: Any, unreachable_server: dict[str, str]
) -> None:
    log_in(page, unreachable_server)
    send(page, "anyone there?")
    error = page.locator(".turn-error")
    expect(error).to_be_visible(timeout=20_000)
    said_in_users_words(error, "unreachable", "The model cannot be reached.")
    expect(page.locator("#model-banner")).to_be_visible()
    error.locator(".retry-button").click()  # the circuit is open now: nothing is called, the words stay
    expect(page.locator(".turn-error")).to_have_count(1)
    said_in_users_words(page.locator(".turn-error"), "unreachable", "The model cannot be reached.")
