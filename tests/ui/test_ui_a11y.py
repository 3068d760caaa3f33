"""axe-core on every screen of the web UI, desktop and phone (issue 26 item 10).

Each screen is a setup function in `SCREENS` (name -> how to get there from a signed-in,
empty chat); a new screen is one more entry. The test fails on any serious or critical
violation of WCAG 2.0/2.1 A and AA and axe's best practices, listing each rule and element.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from testing.fake_llm import FakeLLMServer
from tests.a11y_support import VIEWPORTS, add_axe, assert_accessible
from tests.ui_support import DRAWER_TWINS, TIMEOUT_MS, click_topbar, send, shot

pytestmark = [pytest.mark.browser]

RICH_ANSWER = """## A worked answer

Some **bold**, some *emphasis*, `inline code` and [a link](https://example.org/docs).

1. first step
2. second step

> a quoted line

```python
def total(values):
    return sum(values)
```

| name | score |
|------|------:|
| Ada  | 3     |
| Bob  | 5     |
"""
CHOICE = "/ask_choice level How much Python have you written?\n- none\n- some\n- a lot"


def sign_in(page: Any, server: dict[str, str], token: str | None = None) -> None:
    page.goto(server["base"] + "/")
    page.wait_for_selector("#login-view:not([hidden])")
    page.click("#login-use-token")  # the form asks for a name and password first
    page.fill("#login-token", token or server["token"])
    page.press("#login-token", "Enter")


def new_chat(page: Any, server: dict[str, str]) -> None:
    sign_in(page, server)
    page.wait_for_selector("#app-view[aria-busy='false']")
    page.evaluate("document.getElementById('new-session').click()")  # inside the closed drawer on a phone
    page.wait_for_selector("#empty-hint:not([hidden])")
    page.wait_for_selector("#app-view[aria-busy='false']")


def answered(page: Any, llm: FakeLLMServer, text: str, *replies: Any, wait: str = ".role-assistant") -> None:
    llm.queue(*replies)
    before = page.locator(wait).count()
    send(page, text)
    page.locator(wait).nth(before).wait_for()
    page.wait_for_selector("#stop-button[hidden]", state="attached")


def login(page: Any, server: dict[str, str], llm: FakeLLMServer) -> None:
    page.goto(server["base"] + "/")
    page.wait_for_selector("#login-view:not([hidden])")


def login_error(page: Any, server: dict[str, str], llm: FakeLLMServer) -> None:
    sign_in(page, server, token="not-a-token")
    page.wait_for_selector("#login-error:has-text('not valid')")


def empty_chat(page: Any, server: dict[str, str], llm: FakeLLMServer) -> None:
    new_chat(page, server)


def chat_with_messages(page: Any, server: dict[str, str], llm: FakeLLMServer) -> None:
    new_chat(page, server)
    answered(page, llm, "show me everything", RICH_ANSWER)
    answered(page, llm, "what files do I have?", "/list_files", "Nothing there yet.")
    answered(page, llm, "teach me", CHOICE, wait=".widget-choice[data-status='pending']")
    page.evaluate("() => document.querySelectorAll('#message-list details').forEach((d) => (d.open = true))")


def approval(page: Any, server: dict[str, str], llm: FakeLLMServer) -> None:
    new_chat(page, server)
    answered(
        page, llm, "save my note", "/write_file notes/a11y.md\nhello", wait=".widget-approval[data-status='pending']"
    )


def turn_error(page: Any, server: dict[str, str], llm: FakeLLMServer) -> None:
    new_chat(page, server)
    llm.queue(500, 500)  # the first try and the pipeline's one retry both fail
    send(page, "are you there?")
    page.wait_for_selector(".turn-error")


def drawer(page: Any, server: dict[str, str], llm: FakeLLMServer) -> None:
    new_chat(page, server)
    if page.locator("#sessions-toggle").is_visible():
        page.click("#sessions-toggle")
        page.wait_for_selector("body.drawer-open")
        page.wait_for_timeout(300)  # the slide-in transition


def side_panel(which: str) -> Callable[[Any, dict[str, str], FakeLLMServer], None]:
    def setup(page: Any, server: dict[str, str], llm: FakeLLMServer) -> None:
        new_chat(page, server)
        page.click(f"#{which}-toggle")
        page.wait_for_selector(f"#{which}-panel:not([hidden])")
        page.wait_for_load_state("networkidle")

    return setup


def dialog(opener: str, selector: str) -> Callable[[Any, dict[str, str], FakeLLMServer], None]:
    def setup(page: Any, server: dict[str, str], llm: FakeLLMServer) -> None:
        new_chat(page, server)
        if opener in DRAWER_TWINS:
            click_topbar(page, opener)
        else:
            page.click(opener)
        page.wait_for_selector(f"{selector}[open]")
        page.wait_for_load_state("networkidle")

    return setup


def search_results(page: Any, server: dict[str, str], llm: FakeLLMServer) -> None:
    new_chat(page, server)
    answered(page, llm, "tell me about quokkas", "Quokkas live on Rottnest Island.")
    if page.locator("#sessions-toggle").is_visible():
        page.click("#sessions-toggle")
        page.wait_for_selector("body.drawer-open")
        page.wait_for_timeout(300)  # the slide-in transition
    page.fill("#chat-search-input", "quokkas")
    page.press("#chat-search-input", "Enter")
    page.locator("#chat-search-results .hit-open").first.wait_for()


def dark(
    setup: Callable[[Any, dict[str, str], FakeLLMServer], None],
) -> Callable[[Any, dict[str, str], FakeLLMServer], None]:
    def in_dark(page: Any, server: dict[str, str], llm: FakeLLMServer) -> None:
        page.emulate_media(color_scheme="dark")  # the default theme follows the system
        setup(page, server, llm)

    return in_dark


# name -> setup: from a fresh page to the screen (a new screen is one more entry)
SCREENS: dict[str, Callable[[Any, dict[str, str], FakeLLMServer], None]] = {
    "login": login,
    "login-error": login_error,
    "empty-chat": empty_chat,
    "chat-with-messages": chat_with_messages,
    "approval": approval,
    "turn-error": turn_error,
    "sessions-drawer": drawer,
    "panel-code": side_panel("code"),
    "panel-problems": side_panel("problems"),
    "panel-tasks": side_panel("tasks"),
    "settings": dialog("#settings-open", "#settings-dialog"),
    "memories": dialog("#memories-toggle", "#memories-dialog"),
    "search-results": search_results,
    "dark-chat-with-messages": dark(chat_with_messages),
    "dark-login": dark(login),
}


@pytest.fixture(params=list(VIEWPORTS))
def a11y_page(request: pytest.FixtureRequest, browser: Any, llm: FakeLLMServer) -> Iterator[Any]:
    llm.reset()
    context = browser.new_context(viewport=VIEWPORTS[request.param])
    add_axe(context)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.viewport_name = request.param
    yield page
    context.close()


@pytest.mark.parametrize("screen", list(SCREENS))
def test_no_serious_or_critical_axe_violation(
    screen: str, a11y_page: Any, server: dict[str, str], llm: FakeLLMServer
) -> None:
    SCREENS[screen](a11y_page, server, llm)
    shot(a11y_page, f"a11y-{screen}-{a11y_page.viewport_name}")
    assert_accessible(a11y_page, f"{screen} ({a11y_page.viewport_name})")
