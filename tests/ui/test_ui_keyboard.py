"""The whole chat with the keyboard alone (issue 26 item 10): Tab, Shift+Tab, Enter, Space, Escape.

Signs in, starts a chat, sends, stops an answer, opens and closes each side panel (focus comes
back to its button), answers a widget and reaches the links inside a message. After every key
the focused element must show a focus outline and the focus must never fall back to <body>.
Desktop and phone widths (on a phone the conversations list is a drawer).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testing.fake_llm import FakeLLMServer, StreamReply
from tests.a11y_support import VIEWPORTS, focus_ring
from tests.ui_support import TIMEOUT_MS, shot

pytestmark = [pytest.mark.browser]

MAX_TABS = 80
CHOICE = "/ask_choice level How much Python have you written?\n- none\n- some\n- a lot"


@pytest.fixture(params=list(VIEWPORTS))
def kb(request: pytest.FixtureRequest, browser: Any, llm: FakeLLMServer) -> Iterator[Any]:
    llm.reset()
    context = browser.new_context(viewport=VIEWPORTS[request.param])
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.viewport_name = request.param
    yield page
    context.close()


def focused_matches(page: Any, selector: str) -> bool:
    return bool(
        page.evaluate("(sel) => Boolean(document.activeElement && document.activeElement.matches(sel))", selector)
    )


def visible_focus(page: Any, after: str) -> dict[str, Any]:
    ring = focus_ring(page)
    assert not ring["body"], f"the focus fell back to <body> after {after}"
    assert ring["visible"], f"no visible focus outline on {ring} after {after}"
    return ring


def key(page: Any, name: str) -> dict[str, Any]:
    page.keyboard.press(name)
    return visible_focus(page, name)


def tab_to(page: Any, selector: str, *, backwards: bool = False) -> None:
    """Tab (or Shift+Tab) until `selector` has the focus, checking the focus on every stop."""
    seen = []
    for _ in range(MAX_TABS):
        if focused_matches(page, selector):
            return
        page.keyboard.press("Shift+Tab" if backwards else "Tab")
        ring = focus_ring(page)
        seen.append(ring)
        assert not ring["body"], f"the focus fell back to <body> on the way to {selector}: {seen}"
        assert ring["visible"], f"no visible focus outline on the way to {selector}: {seen}"
    raise AssertionError(f"{selector!r} cannot be reached with {'Shift+Tab' if backwards else 'Tab'}")


def settle(page: Any, selector: str) -> None:
    """Wait for the UI to react, then check the focus is still somewhere visible."""
    page.wait_for_selector(selector, state="attached")
    visible_focus(page, f"waiting for {selector}")


def test_whole_flow_with_the_keyboard_alone(kb: Any, server: dict[str, str], llm: FakeLLMServer) -> None:
    page = kb
    phone = page.viewport_name == "phone"
    page.goto(server["base"] + "/")
    page.wait_for_selector("#login-view:not([hidden])")
    assert focused_matches(page, "#login-name"), "the name field has the focus on the sign-in page"
    tab_to(page, "#login-use-token")
    key(page, "Enter")
    assert focused_matches(page, "#login-token"), "choosing the token puts the focus on its field"
    page.keyboard.type(server["token"])
    key(page, "Enter")
    settle(page, "#app-view[aria-busy='false']")
    assert focused_matches(page, "#composer-input")

    # a new chat: through the drawer on a phone
    if phone:
        tab_to(page, "#sessions-toggle", backwards=True)
        key(page, "Enter")
        assert focused_matches(page, "#new-session")
    else:
        tab_to(page, "#new-session", backwards=True)
    key(page, "Enter")
    settle(page, "#session-list .session-item.active")
    page.wait_for_selector("#app-view[aria-busy='false']")
    assert focused_matches(page, "#composer-input")

    # send, then Stop from the keyboard: focus goes to Stop and back to the message box
    llm.queue(StreamReply(pieces=("Thinking it over ",), hang=True))
    page.keyboard.type("a long question")
    key(page, "Enter")
    page.wait_for_selector(".live-answer .bubble:has-text('Thinking it over')")
    tab_to(page, "#stop-button")
    key(page, "Space")
    settle(page, ".stopped-note")
    page.wait_for_selector("#stop-button", state="hidden")
    visible_focus(page, "the answer stopped")

    # each side panel: open with Enter, its first field has the focus, Escape gives it back
    for which, first in (("code", "#run-code"), ("problems", "#generate-topic"), ("tasks", "#tasks-refresh")):
        tab_to(page, f"#{which}-toggle", backwards=which == "code")  # the next ones follow it
        key(page, "Enter")
        page.wait_for_selector(f"#{which}-panel:not([hidden])")
        assert focused_matches(page, first), f"{which}: the panel's first field has the focus"
        key(page, "Escape")
        page.wait_for_selector("#side-panel", state="hidden")
        assert focused_matches(page, f"#{which}-toggle"), f"{which}: Escape gives the focus back to its button"
    # and the panel's Close button with Enter
    key(page, "Enter")
    page.wait_for_selector("#side-panel:not([hidden])")
    tab_to(page, "#side-close", backwards=True)
    key(page, "Enter")
    page.wait_for_selector("#side-panel", state="hidden")
    assert focused_matches(page, "#tasks-toggle")

    # a widget: its first option gets the focus, Tab to another, Space answers
    tab_to(page, "#composer-input")
    llm.queue(CHOICE)
    page.keyboard.type("teach me")
    key(page, "Enter")
    page.wait_for_selector(".widget-choice[data-status='pending']")
    page.wait_for_function("() => document.activeElement.classList.contains('widget-option')")
    visible_focus(page, "the widget asked")
    llm.queue("Good, we start from [the tutorial](https://example.org/tutorial).")
    key(page, "Tab")
    assert focused_matches(page, ".widget-option"), "Tab moves between the options"
    key(page, "Space")
    settle(page, ".role-assistant:has-text('we start from')")
    assert focused_matches(page, "#composer-input"), "after the answer the message box has the focus again"

    # the links inside messages are reachable, backwards from the message box
    tab_to(page, ".role-assistant a[href='https://example.org/tutorial']", backwards=True)
    shot(page, f"keyboard-link-{page.viewport_name}")
