"""Interactive widgets in a real browser (SPEC section 8, issue 6 item 3).

The model (FakeLLMServer) asks with `/ask_choice`, `/ask_text` or `/confirm`; the page
renders a widget, the test answers it like a user (click, Enter), and the continuation
reply appears without a reload. The server, the browser and the `ui` page are those of
`tests/ui/test_ui_browser.py` (one fresh server, so one fresh profile, for this module).
"""

from __future__ import annotations

from typing import Any

import pytest
import requests

from testing.fake_llm import FakeLLMServer
from tests.ui_support import send, shot

pytestmark = [pytest.mark.browser]

CHOICE = "/ask_choice experience How much Python have you written?\n- none\n- some\n- a lot"


def profile(server: dict[str, str]) -> dict[str, Any]:
    response = requests.get(
        server["base"] + "/api/profile", headers={"Authorization": f"Bearer {server['token']}"}, timeout=5
    )
    assert response.status_code == 200, response.text
    return response.json()["fields"]


def navigations(page: Any) -> list[str]:
    """Record main-frame navigations: answering a widget must not reload the page."""
    seen: list[str] = []
    page.on("framenavigated", lambda frame: seen.append(frame.url) if frame == page.main_frame else None)
    return seen


def test_choice_widget_answer_continues_the_conversation_without_reload(
    ui: Any, llm: FakeLLMServer, server: dict[str, str]
) -> None:
    llm.queue(CHOICE)
    send(ui, "help me learn python")
    widget = ui.locator(".widget-choice[data-status='pending']")
    widget.wait_for()
    assert widget.locator(".widget-question").inner_text() == "How much Python have you written?"
    options = widget.get_by_role("button")
    assert options.all_inner_texts() == ["none", "some", "a lot"]
    assert widget.get_by_role("group", name="How much Python have you written?").count() == 1
    assert ui.locator(".role-tool .tool-block").count() == 0  # a widget, not a raw tool block
    ui.wait_for_function("document.activeElement.classList.contains('widget-option')")  # keyboard-ready
    shot(ui, "13-widget-choice")

    reloads = navigations(ui)
    marker = ui.evaluate("window.__noReload = 1")  # survives only if the page is never reloaded
    assert marker == 1
    llm.reset(delay_s=0.6)
    llm.queue("Great, let's start with functions.")
    widget.get_by_role("button", name="some").click()
    ui.locator(".widget-choice.widget-busy .widget-fieldset:disabled").wait_for()  # disabled while sending
    ui.locator(".progress.running").last.wait_for()
    reply = ui.locator('.role-assistant:has-text("Great, let\'s start with functions.")')
    reply.wait_for()
    assert ui.evaluate("window.__noReload") == 1 and reloads == []
    assert ui.locator(".role-answer .answer-chip").inner_text() == "You answered: some"
    answered = ui.locator(".widget-choice[data-status='answered']")
    assert answered.locator(".widget-option.chosen").inner_text() == "some"
    assert answered.locator(".widget-option.chosen").get_attribute("aria-pressed") == "true"
    assert all(button.is_disabled() for button in answered.get_by_role("button").all())
    assert "Answered: some" in answered.locator(".widget-status").inner_text()
    assert llm.requests[-1]["messages"][-1]["content"].startswith("Tool result for /ask_choice")

    field = profile(server)["experience"]
    assert field["value"] == "some" and field["source"] == "user_input" and field["input_method"] == "selection"

    ui.reload()
    ui.wait_for_selector("#app-view[aria-busy='false']")
    reloaded = ui.locator(".widget-choice")
    reloaded.wait_for()
    assert reloaded.get_attribute("data-status") == "answered"
    assert reloaded.locator(".widget-option.chosen").inner_text() == "some"
    assert all(button.is_disabled() for button in reloaded.get_by_role("button").all())
    assert ui.locator(".role-answer .answer-chip").inner_text() == "You answered: some"
    ui.locator('.role-assistant:has-text("Great, let\'s start with functions.")').wait_for()
    shot(ui, "14-widget-answered")


def test_text_widget_is_answered_with_enter(ui: Any, llm: FakeLLMServer, server: dict[str, str]) -> None:
    llm.queue("/ask_text goal What would you like to build?", "A web scraper it is.")
    send(ui, "let's plan a project")
    ui.locator(".widget-text[data-status='pending']").wait_for()
    widget = ui.locator(".widget-text")
    answer = widget.get_by_label("Your answer")
    ui.wait_for_function("document.activeElement.classList.contains('widget-input')")
    answer.press("Enter")  # empty: refused in the page, nothing sent
    assert widget.locator(".widget-error").inner_text() == "Type an answer first."
    assert len(llm.requests) == 1
    answer.fill("  a web scraper ")
    shot(ui, "15-widget-text")
    answer.press("Enter")
    ui.locator(".role-assistant:has-text('A web scraper it is.')").wait_for()
    assert widget.get_attribute("data-status") == "answered"
    assert answer.is_disabled() and answer.input_value() == "a web scraper"
    assert ui.locator(".role-answer .answer-chip").inner_text() == "You answered: a web scraper"
    field = profile(server)["goal"]
    assert field["value"] == "a web scraper" and field["input_method"] == "text" and field["source"] == "user_input"
    assert ui.evaluate("document.activeElement.id") == "composer-input"


def test_confirm_widget_fails_then_succeeds_after_the_field_is_set(
    ui: Any, llm: FakeLLMServer, server: dict[str, str]
) -> None:
    assert "location" not in profile(server)
    llm.queue("/confirm location Is Paris still your city?", "Thanks for confirming.")
    send(ui, "what's the weather where I live?")
    ui.locator(".widget-confirm[data-status='pending']").wait_for()
    widget = ui.locator(".widget-confirm")
    assert widget.get_by_role("button").all_inner_texts() == ["Confirm", "Make changes"]

    widget.get_by_role("button", name="Confirm").click()
    error = widget.locator(".widget-error")
    error.wait_for()
    assert "no profile field location" in error.inner_text()
    assert "PROFILE_UPDATE_FAILED" not in error.inner_text()  # said to a person: no error code
    assert widget.get_attribute("data-status") == "pending"  # still open: try again
    assert widget.get_by_role("button", name="Confirm").is_enabled()
    assert ui.locator(".role-assistant").count() == 0 and len(llm.requests) == 1
    shot(ui, "16-widget-error")

    status = ui.evaluate(
        """async () => (await fetch('/api/profile', {method: 'PATCH', credentials: 'same-origin',
               headers: {'Content-Type': 'application/json', 'X-Requested-With': 'fetch'},
               body: JSON.stringify({fields: {location: 'Paris'}})})).status"""
    )
    assert status == 200
    widget.get_by_role("button", name="Confirm").click()
    ui.locator(".role-assistant:has-text('Thanks for confirming.')").wait_for()
    assert widget.get_attribute("data-status") == "answered"
    assert widget.locator(".widget-error").is_hidden()
    assert widget.locator(".widget-option.chosen").inner_text() == "Confirm"
    assert ui.locator(".role-answer .answer-chip").inner_text() == "You confirmed your location."
    assert profile(server)["location"]["confirmed"] is True
    shot(ui, "17-widget-confirmed")

    # After a reload the failed attempt shows compactly, the widget as answered.
    ui.reload()
    ui.wait_for_selector("#app-view[aria-busy='false']")
    ui.locator(".widget-confirm[data-status='answered'] .widget-option.chosen:has-text('Confirm')").wait_for()
    failed = ui.locator(".role-answer .answer-failed")
    assert "Your answer was not saved" in failed.inner_text() and "PROFILE_UPDATE_FAILED" not in failed.inner_text()
    assert failed.locator(".badge").get_attribute("title") == "PROFILE_UPDATE_FAILED"  # kept, out of the text
    shot(ui, "18-widget-history")


def test_already_answered_widget_says_so(ui: Any, llm: FakeLLMServer, server: dict[str, str]) -> None:
    llm.queue("/ask_choice level Pick a level\n- beginner\n- expert", "Beginner it is.")
    send(ui, "pick my level")
    ui.locator(".widget-choice[data-status='pending']").wait_for()
    widget = ui.locator(".widget-choice")
    # Answered elsewhere (another tab) while this page still shows the question.
    session_id = ui.evaluate("localStorage.getItem('orchestrator.lastSession')")
    messages = requests.get(
        f"{server['base']}/sessions/{session_id}/messages",
        headers={"Authorization": f"Bearer {server['token']}"},
        timeout=5,
    ).json()["messages"]
    meta = messages[-1]["meta"]
    other = requests.post(
        server["base"] + "/api/ai/tool-result",
        headers={"Authorization": f"Bearer {server['token']}"},
        json={
            "conversationId": session_id,
            "toolCallId": meta["tool_call_id"],
            "toolName": "ask_choice",
            "targetField": "level",
            "value": "beginner",
            "inputMethod": "selection",
        },
        timeout=5,
    )
    assert other.status_code == 200
    widget.get_by_role("button", name="expert").click()
    error = widget.locator(".widget-error")
    error.wait_for()
    assert "already answered" in error.inner_text()
    assert widget.get_attribute("data-status") == "answered"
    assert all(button.is_disabled() for button in widget.get_by_role("button").all())


def test_widget_text_from_the_model_stays_text(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue(
        "/ask_choice pick <img src=x onerror=window.__xss=1> which?\n- <b>bold</b>\n- <script>window.__xss=2</script>"
    )
    send(ui, "ask me something odd")
    widget = ui.locator(".widget-choice")
    widget.wait_for()
    assert widget.locator(".widget-question").inner_text() == "<img src=x onerror=window.__xss=1> which?"
    assert widget.get_by_role("button").all_inner_texts() == ["<b>bold</b>", "<script>window.__xss=2</script>"]
    assert widget.locator("img, b, script").count() == 0
    ui.set_viewport_size({"width": 390, "height": 844})
    assert ui.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(ui, "19-widget-phone")
