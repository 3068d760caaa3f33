"""Versions of a chat in a real browser (issue 26 items 2 and 7; SPEC 17).

Regenerate an answer, edit a sent message, switch versions with ‹ 2/3 ›, a reload keeps the
version on screen, the next turn's context is that branch (checked in the fake model's
requests), a failed turn keeps its error with Retry after a reload, and all of it by keyboard.
Desktop and phone widths. Screenshots: test-artifacts/screenshots/versions-*.png.
"""

from __future__ import annotations

from typing import Any

import pytest

from testing.fake_llm import FakeLLMServer, StreamReply
from tests.ui_support import open_session_id, rest, send, shot, wait_turn_over, wait_turn_running

pytestmark = [pytest.mark.browser]

WIDTHS = {"desktop": {"width": 1280, "height": 860}, "phone": {"width": 390, "height": 844}}
ANSWER = ".role-assistant .bubble"


def seen_by_model(llm: FakeLLMServer, first: str) -> list[str]:
    """The conversation of the last model call from the chat's first message on (the
    demonstrations of PROMPT_DEMOS come before it); None of it may come before."""
    contents = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] != "system"]
    assert first in contents, contents
    return contents[contents.index(first) :]


def wait_answer(page: Any, text: str) -> None:
    page.locator(ANSWER, has_text=text).first.wait_for()
    page.wait_for_selector(".progress.running", state="detached")
    page.wait_for_selector("#app-view[aria-busy='false']")


def version_label(page: Any) -> str:
    return page.locator(".version-count .visually-hidden").first.inner_text()


@pytest.mark.parametrize("width", WIDTHS)
def test_regenerate_edit_switch_and_reload(ui: Any, llm: FakeLLMServer, width: str) -> None:
    ui.set_viewport_size(WIDTHS[width])
    llm.queue("First answer about owls.", "Second answer about owls.")
    send(ui, "Tell me about owls")
    wait_answer(ui, "First answer")

    ui.get_by_role("button", name="Regenerate this answer").click()
    wait_answer(ui, "Second answer")
    assert seen_by_model(llm, "Tell me about owls") == ["Tell me about owls"]  # the old answer is not in the context
    assert ui.locator(ANSWER).count() == 1
    assert version_label(ui) == "Version 2 of 2"
    assert ui.get_by_role("button", name="Next version").is_disabled()
    shot(ui, f"versions-regenerated-{width}")

    ui.get_by_role("button", name="Previous version").click()
    ui.locator(ANSWER, has_text="First answer").wait_for()
    assert version_label(ui) == "Version 1 of 2"
    assert ui.locator(ANSWER).count() == 1
    ui.reload()
    ui.locator(ANSWER, has_text="First answer").wait_for()
    assert version_label(ui) == "Version 1 of 2"  # the server keeps the version on screen

    llm.queue("Owls hunt at night.")
    send(ui, "When do they hunt?")
    wait_answer(ui, "Owls hunt at night.")
    assert seen_by_model(llm, "Tell me about owls") == [
        "Tell me about owls",
        "First answer about owls.",
        "When do they hunt?",
    ]

    llm.queue("Herons stand still.")
    ui.get_by_role("button", name="Edit this message").first.click()
    editor = ui.get_by_label("Edit your message")
    assert editor.input_value() == "Tell me about owls"
    editor.fill("Tell me about herons")
    shot(ui, f"versions-editing-{width}")
    ui.get_by_role("button", name="Save & send").click()
    wait_answer(ui, "Herons stand still.")
    assert seen_by_model(llm, "Tell me about herons") == ["Tell me about herons"]
    assert not any("owls" in m["content"] for m in llm.requests[-1]["messages"])
    assert ui.locator(".role-user .bubble").all_inner_texts() == ["Tell me about herons"]
    assert version_label(ui) == "Version 2 of 2"
    shot(ui, f"versions-edited-{width}")

    ui.get_by_role("button", name="Previous version").first.click()
    ui.locator(".role-user .bubble", has_text="When do they hunt?").wait_for()  # the whole old version
    assert ui.locator(".role-user .bubble").all_inner_texts() == ["Tell me about owls", "When do they hunt?"]
    shot(ui, f"versions-switched-back-{width}")


def test_keyboard_only_regenerate_edit_and_switch(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue("Answer one.", "Answer two.", "Answer three.")
    send(ui, "Question")
    wait_answer(ui, "Answer one.")
    ui.get_by_role("button", name="Regenerate this answer").focus()
    ui.keyboard.press("Enter")
    wait_answer(ui, "Answer two.")
    ui.get_by_role("button", name="Regenerate this answer").focus()
    ui.keyboard.press("Space")
    wait_answer(ui, "Answer three.")
    assert version_label(ui) == "Version 3 of 3"

    ui.get_by_role("button", name="Previous version").focus()
    ui.keyboard.press("Enter")
    ui.locator(ANSWER, has_text="Answer two.").wait_for()
    assert version_label(ui) == "Version 2 of 3"
    # the focus stays on the switcher, so the next key goes on switching
    assert ui.evaluate("document.activeElement.getAttribute('aria-label')") == "Previous version"
    ui.keyboard.press("Enter")
    ui.locator(ANSWER, has_text="Answer one.").wait_for()
    assert version_label(ui) == "Version 1 of 3"
    shot(ui, "versions-keyboard-switch")

    ui.get_by_role("button", name="Edit this message").focus()
    ui.keyboard.press("Enter")
    assert ui.evaluate("document.activeElement.getAttribute('id') || ''").startswith("edit-")
    ui.keyboard.type(" changed")
    ui.keyboard.press("Escape")  # cancels: nothing sent, the message as it was
    assert ui.locator(".version-editor").count() == 0
    assert ui.locator(".role-user .bubble").inner_text() == "Question"
    assert ui.evaluate("document.activeElement.getAttribute('aria-label')") == "Edit this message"

    llm.queue("Answer to the edit.")
    ui.keyboard.press("Enter")
    ui.keyboard.press("End")
    ui.keyboard.type(" again")
    ui.keyboard.press("Enter")  # Enter sends, as in the composer
    wait_answer(ui, "Answer to the edit.")
    assert seen_by_model(llm, "Question again") == ["Question again"]


def test_failed_turn_keeps_its_error_and_retry_after_a_reload(
    ui: Any, llm: FakeLLMServer, server: dict[str, str]
) -> None:
    llm.queue("Fine.")
    send(ui, "hello")
    wait_answer(ui, "Fine.")
    llm.queue(500, 500)  # the first try and the pipeline's one retry both fail
    send(ui, "this one fails")
    ui.locator(".turn-error").wait_for()
    session_id = open_session_id(ui)
    wait_turn_over(server, session_id)
    stored = rest(server, "GET", f"/sessions/{session_id}/messages")["messages"]
    assert stored[-1]["meta"]["turn_error"]["code"] == "provider_unavailable"

    ui.reload()
    error = ui.locator(".branch-error")
    error.wait_for()
    assert "The model is overloaded." in error.inner_text()  # a 500, said in the user's words
    assert "Your message was kept" in error.inner_text()
    assert ui.locator(".role-user .bubble").all_inner_texts() == ["hello", "this one fails"]  # shown once
    shot(ui, "versions-retry-after-reload")

    llm.queue("Recovered answer.")
    error.get_by_role("button", name="Retry").click()
    wait_answer(ui, "Recovered answer.")
    assert ui.locator(".turn-error").count() == 0
    assert seen_by_model(llm, "hello") == ["hello", "Fine.", "this one fails"]  # the message is not sent twice
    ui.reload()
    ui.locator(ANSWER, has_text="Recovered answer.").wait_for()
    assert ui.locator(".turn-error").count() == 0
    assert ui.locator(".role-user .bubble").all_inner_texts() == ["hello", "this one fails"]


def test_an_unanswered_message_offers_retry_after_a_reload(ui: Any, llm: FakeLLMServer, server: dict[str, str]) -> None:
    """A turn that stored no answer and no failure mark (stopped before any text; as a turn whose
    server died, `turn_lost`) still ends the chat with Retry after a reload."""
    llm.queue(StreamReply(pieces=("never shown",), delay_s=5.0))
    send(ui, "stop me")
    session_id = open_session_id(ui)
    wait_turn_running(server, session_id)
    ui.get_by_role("button", name="Stop the answer").click()
    wait_turn_over(server, session_id)
    ui.reload()
    error = ui.locator(".branch-error")
    error.wait_for()
    assert "This message has no answer." in error.inner_text()
    llm.reset()
    llm.queue("Answered after all.")
    error.get_by_role("button", name="Retry").click()
    wait_answer(ui, "Answered after all.")
    assert ui.locator(".role-user .bubble").all_inner_texts() == ["stop me"]
