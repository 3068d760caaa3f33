"""The Settings dialog in a real browser (SPEC 17; issue 26 item 5), at desktop and phone width.

Theme (light, dark, following the system through `emulate_media`, kept across a reload and applied
before the first paint), the chat's model from the configured chain (the next turn's request to the
fake model names it), the personal instructions with their counter, and tools that ask first (the
user adds one; the operator's stay checked and disabled), all with the keyboard alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testing.fake_llm import FakeLLMServer
from tests.ui_support import (
    ROOT,
    click_topbar,
    open_session_id,
    require_axe,
    require_chromium,
    rest,
    send,
    serve,
    shot,
    wait_turn_over,
)

pytestmark = [pytest.mark.browser]

LIGHT_BG = "rgb(246, 247, 249)"  # app.css --bg
DARK_BG = "rgb(20, 23, 28)"  # theme.css --bg
DARK_TEXT = "rgb(230, 233, 239)"
SECOND = "openai:fake-second"
AXE = ROOT / "web" / "node_modules" / "axe-core" / "axe.min.js"
SIZES = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}


@pytest.fixture(scope="module")
def server(llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The real server with a chain of two models: `openai:fake`, then `openai:fake-second`."""
    require_chromium()
    with serve(llm, tmp_path_factory.mktemp("ui-server"), LLM_FALLBACKS=SECOND) as running:
        yield running


@pytest.fixture(params=list(SIZES))
def page_size(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def defaults(server: dict[str, str]) -> None:
    """The user's settings back to the defaults, before the page signs in (and reads them)."""
    rest(server, "PATCH", "/api/settings", json={"theme": "system", "system_prompt": "", "approval": {}})


@pytest.fixture
def page_ui(defaults: None, ui: Any, page_size: str) -> Any:
    """A signed-in page at the size under test, with the user's settings the defaults."""
    ui.set_viewport_size(SIZES[page_size])
    ui.emulate_media(color_scheme="light")
    return ui


def background(page: Any) -> str:
    return str(page.evaluate("getComputedStyle(document.documentElement).backgroundColor"))


def text_colour(page: Any) -> str:
    return str(page.evaluate("getComputedStyle(document.body).color"))


def open_dialog(page: Any) -> Any:
    page.click("#settings-open")
    dialog = page.locator("#settings-dialog")
    dialog.wait_for()
    page.wait_for_function("() => document.getElementById('settings-model').options.length > 1")
    return dialog


def test_the_theme_changes_the_colours_at_once_and_survives_a_reload(
    page_ui: Any, server: dict[str, str], page_size: str
) -> None:
    page = page_ui
    assert background(page) == LIGHT_BG
    open_dialog(page)
    shot(page, f"settings-{page_size}-light")
    page.get_by_label("Dark", exact=True).check()
    page.wait_for_function("() => document.documentElement.dataset.theme === 'dark'")
    assert background(page) == DARK_BG and text_colour(page) == DARK_TEXT
    page.wait_for_function("() => document.getElementById('settings-status').textContent.startsWith('Theme')")
    assert rest(server, "GET", "/api/settings")["theme"] == "dark"
    shot(page, f"settings-{page_size}-dark")
    page.keyboard.press("Escape")
    assert page.locator("#settings-dialog").is_hidden()
    shot(page, f"settings-{page_size}-chat-dark")

    # before the first paint: the attribute is set by the blocking head script, before any module runs
    page.add_init_script(
        "document.addEventListener('readystatechange', () => {"
        " if (document.readyState === 'interactive' && !window.__firstTheme)"
        " window.__firstTheme = document.documentElement.dataset.theme || 'none'; });"
    )
    page.reload()
    page.wait_for_selector("#app-view[aria-busy='false']")
    assert page.evaluate("window.__firstTheme") == "dark"
    assert background(page) == DARK_BG

    page.evaluate("localStorage.clear()")  # another browser: the server's choice applies after sign-in
    page.reload()
    page.wait_for_selector("#app-view[aria-busy='false']")
    page.wait_for_function("() => document.documentElement.dataset.theme === 'dark'")
    assert page.evaluate("localStorage.getItem('orchestrator.theme')") == "dark"


def test_system_follows_the_operating_system(page_ui: Any) -> None:
    page = page_ui
    open_dialog(page)
    assert page.get_by_label("Follow the system").is_checked()
    page.emulate_media(color_scheme="dark")
    assert background(page) == DARK_BG
    page.emulate_media(color_scheme="light")
    assert background(page) == LIGHT_BG
    page.get_by_label("Light", exact=True).check()  # forced light wins over a dark system
    page.wait_for_function("() => document.documentElement.dataset.theme === 'light'")
    page.emulate_media(color_scheme="dark")
    assert background(page) == LIGHT_BG
    page.get_by_label("Follow the system").check()
    page.wait_for_function("() => document.documentElement.dataset.theme === undefined")
    assert background(page) == DARK_BG


def test_the_chosen_model_answers_the_next_turn(page_ui: Any, llm: FakeLLMServer, server: dict[str, str]) -> None:
    page = page_ui
    llm.queue("first answer")
    send(page, "hello")
    page.locator(".role-assistant").first.wait_for()
    session_id = open_session_id(page)
    wait_turn_over(server, session_id)
    assert [request["model"] for request in llm.requests] == ["fake"]
    dialog = open_dialog(page)
    labels = page.locator("#settings-model option").all_inner_texts()
    assert labels[0].startswith("Default") and any(label.startswith("fake-second (openai)") for label in labels)
    page.select_option("#settings-model", SECOND)
    page.wait_for_function("() => document.getElementById('settings-status').textContent.startsWith('This chat now')")
    assert rest(server, "GET", f"/sessions/{session_id}")["model"] == SECOND
    dialog.press("Escape")
    llm.queue("second answer")
    send(page, "again")
    page.locator(".role-assistant").nth(1).wait_for()
    wait_turn_over(server, session_id)
    assert [request["model"] for request in llm.requests] == ["fake", "fake-second"]


def test_a_tool_the_user_marks_asks_first_and_the_operators_stay_locked(
    page_ui: Any, llm: FakeLLMServer, server: dict[str, str], page_size: str
) -> None:
    page = page_ui
    open_dialog(page)
    locked = page.locator("#settings-tool-write_file")
    assert locked.is_checked() and locked.is_disabled()
    assert "operator" in page.locator("#settings-tool-write_file-why").inner_text()
    remember = page.locator("#settings-tool-remember")
    assert not remember.is_checked() and remember.is_enabled()
    remember.check()
    page.wait_for_function("() => document.getElementById('settings-status').textContent === 'Saved.'")
    assert rest(server, "GET", "/api/settings")["approval"]["commands"] == ["remember"]
    shot(page, f"settings-{page_size}-tools")
    page.locator("#settings-ask-all").check()  # every tool asks: each box shows it, none can change
    page.wait_for_function("() => document.getElementById('settings-tool-weather').disabled")
    assert page.locator("#settings-tool-weather").is_checked()
    assert rest(server, "GET", "/api/settings")["approval"] == {"every_command": True, "commands": ["remember"]}
    page.locator("#settings-ask-all").uncheck()  # back: the user's own list is as it was
    page.wait_for_function("() => !document.getElementById('settings-tool-weather').disabled")
    assert not page.locator("#settings-tool-weather").is_checked()
    assert page.locator("#settings-tool-remember").is_checked()
    assert rest(server, "GET", "/api/settings")["approval"] == {"every_command": False, "commands": ["remember"]}
    page.keyboard.press("Escape")
    llm.queue("/remember tea at five")
    send(page, "remember tea")
    widget = page.locator(".widget-approval[data-status='pending']")
    widget.wait_for()
    assert "/remember tea at five" in widget.locator(".widget-command").inner_text()


def test_instructions_with_their_counter_reach_the_model(
    page_ui: Any, llm: FakeLLMServer, server: dict[str, str]
) -> None:
    page = page_ui
    open_dialog(page)
    page.fill("#settings-prompt", "Answer like a pirate.")
    assert page.locator("#settings-prompt-count").inner_text() == "21 / 4000 characters"
    page.click("#settings-prompt-save")
    page.wait_for_function("() => document.getElementById('settings-status').textContent === 'Instructions saved.'")
    assert rest(server, "GET", "/api/settings")["system_prompt"] == "Answer like a pirate."
    page.keyboard.press("Escape")
    llm.queue("Arr.")
    send(page, "hello")
    page.locator(".role-assistant").first.wait_for()
    system = llm.requests[-1]["messages"][0]
    assert system["role"] == "system" and "> Answer like a pirate." in system["content"]


def test_keyboard_only(page_ui: Any) -> None:
    page = page_ui
    page.focus("#settings-open")
    page.keyboard.press("Enter")
    page.locator("#settings-dialog").wait_for()
    assert page.evaluate("document.activeElement.id") == "settings-theme-system"
    page.keyboard.press("ArrowRight")  # the radio group: arrows choose
    page.wait_for_function("() => document.documentElement.dataset.theme === 'light'")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.documentElement.dataset.theme === 'dark'")
    seen = set()
    for _ in range(60):  # Tab goes round the dialog and never leaves it
        page.keyboard.press("Tab")
        inside = page.evaluate("document.getElementById('settings-dialog').contains(document.activeElement)")
        assert inside, page.evaluate("document.activeElement.outerHTML")
        seen.add(page.evaluate("document.activeElement.id"))
    assert {"settings-close", "settings-model", "settings-prompt", "settings-ask-all", "settings-tool-remember"} <= seen
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.getElementById('settings-dialog').contains(document.activeElement)")
    page.keyboard.press("Escape")
    assert page.locator("#settings-dialog").is_hidden()
    assert page.evaluate("document.activeElement.id") == "settings-open"  # the focus came back
    assert background(page) == DARK_BG


def serious_violations(page: Any) -> list[str]:
    """axe-core's serious and critical findings on the page as it is now (run through the
    DevTools protocol, which the page's CSP does not govern)."""
    if not AXE.is_file():
        require_axe(f"axe-core is not installed at {AXE} (scripts/setup.sh)")
    page.evaluate(AXE.read_text(encoding="utf-8") + "\n;0")
    found = page.evaluate(
        "async () => (await axe.run(document)).violations"
        ".filter((v) => v.impact === 'serious' || v.impact === 'critical')"
        ".map((v) => v.id + ': ' + v.nodes.map((n) => n.target.join(' ')).join(', '))"
    )
    return list(found)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_axe_finds_nothing_serious_in_either_theme(page_ui: Any, llm: FakeLLMServer, theme: str) -> None:
    page = page_ui
    llm.queue("Here is code:\n\n```python\ndef f(x):\n    return x + 1  # add one\n```\n\n> a quote, `inline`")
    send(page, "show me code")
    page.locator(".role-assistant .hljs").first.wait_for()
    open_dialog(page)
    page.get_by_label("Dark" if theme == "dark" else "Light", exact=True).check()
    page.wait_for_function(f"() => document.documentElement.dataset.theme === '{theme}'")
    assert serious_violations(page) == []
    page.keyboard.press("Escape")
    shot(page, f"settings-chat-code-{theme}")
    assert serious_violations(page) == []


def test_every_surface_in_the_dark(page_ui: Any, llm: FakeLLMServer, server: dict[str, str], page_size: str) -> None:
    """Tool blocks, an approval widget, the side panel and the sign-in page in the dark theme:
    axe finds no serious contrast (or other) problem on any of them."""
    page = page_ui
    page.emulate_media(color_scheme="dark")  # "system", on a dark system
    assert background(page) == DARK_BG
    llm.queue("/remember tea at five", "Noted: **tea** at five.")
    send(page, "remember tea")
    page.locator(".role-tool .tool-block").first.wait_for()
    page.locator(".role-assistant").first.wait_for()
    llm.queue("/write_file notes.md\nhello")
    send(page, "save a note")
    page.locator(".widget-approval[data-status='pending']").wait_for()
    wait_turn_over(server, open_session_id(page))
    assert serious_violations(page) == []
    shot(page, f"settings-{page_size}-dark-tools")
    page.click("#code-toggle")
    page.locator("#code-panel").wait_for()
    assert serious_violations(page) == []
    shot(page, f"settings-{page_size}-dark-panel")
    page.click("#side-close")
    click_topbar(page, "#logout-button")
    page.locator("#login-view").wait_for()
    if page.locator("#login-use-token").is_visible():  # the form remembers the token mode
        page.click("#login-use-token")
    page.fill("#login-token", "not-a-token")
    page.press("#login-token", "Enter")
    page.wait_for_function("() => document.getElementById('login-error').textContent !== ''")
    assert background(page) == DARK_BG
    assert serious_violations(page) == []
    shot(page, f"settings-{page_size}-dark-login")
