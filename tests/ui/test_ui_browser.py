"""The chat web UI in a real browser: Debian's chromium driven by Playwright.

One real server (`python app.py`, gunicorn) for the module, talking the OpenAI wire format
to `FakeLLMServer` on loopback, so each test queues exactly the model replies it needs and
can slow the model down (`delay_s`) to watch live progress. Every test asserts that no
dialog opened and no script ran (`window.__xss` stays unset). Screenshots of each main
screen go to `test-artifacts/screenshots/`.

Without /usr/bin/chromium these tests fail under `CI` or `BROWSER_REQUIRED=1` (the CI must
not pass silently), and skip otherwise; `scripts/test.sh` installs chromium as root.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests

from testing.fake_llm import FakeLLMServer, tiny_png
from tests.ui_support import TIMEOUT_MS, seen_before_reply, send, shot

pytestmark = [
    pytest.mark.browser,
    # pytest-playwright 0.10's own `base_url` fixture trips a pytest 9 deprecation notice
]


def test_page_is_served_with_a_strict_csp(server: dict[str, str]) -> None:
    response = requests.get(server["base"] + "/", timeout=5)
    csp = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "default-src 'self'" in csp and "unsafe-inline" not in csp
    for asset in ("/static/js/app.js", "/static/vendor/purify.es.js", "/static/vendor/marked.esm.js"):
        assert requests.get(server["base"] + asset, timeout=5).status_code == 200, asset


def test_login_rejects_a_bad_token_then_accepts_the_right_one(server: dict[str, str], page: Any) -> None:
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(server["base"] + "/")
    page.wait_for_selector("#login-view:not([hidden])")
    shot(page, "01-login")
    page.click("#login-use-token")
    page.fill("#login-token", "not-a-token")
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#login-error:has-text('not valid')")
    page.fill("#login-token", server["token"])
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#app-view:not([hidden])")
    assert page.evaluate("localStorage.length") <= 1  # at most the last session id, never the token
    assert server["token"] not in str(page.evaluate("JSON.stringify(localStorage)"))


def test_send_shows_live_progress_before_the_markdown_reply(ui: Any, llm: FakeLLMServer) -> None:
    llm.reset(delay_s=0.8)
    llm.queue("Hello **there**\n\n```python\nprint('hi')\n```")
    send(ui, "hi")
    seen_before_reply(ui, ".progress.running .step.running:has-text('Calling the model')")
    shot(ui, "02-progress")
    reply = ui.locator(".role-assistant .bubble")
    reply.wait_for()
    assert reply.locator("strong").inner_text() == "there"
    assert ui.locator(".role-assistant .code-block .copy-button").count() == 1
    assert ui.locator(".role-assistant code.hljs span").count() > 0  # highlighted
    assert "Model answered" in (ui.locator(".progress").text_content() or "")  # kept, folded
    assert ui.input_value("#composer-input") == ""
    shot(ui, "03-chat-reply")


def test_shift_enter_makes_a_new_line_instead_of_sending(ui: Any, llm: FakeLLMServer) -> None:
    ui.fill("#composer-input", "line one")
    ui.press("#composer-input", "Shift+Enter")
    ui.type("#composer-input", "line two")
    assert ui.input_value("#composer-input") == "line one\nline two"
    assert llm.requests == []


def test_tool_turn_is_a_collapsible_block_and_its_output_stays_inert(ui: Any, llm: FakeLLMServer) -> None:
    payload = "<img src=x onerror=window.__xss=1> <script>window.__xss=2</script>"
    llm.reset(delay_s=0.3)
    llm.queue(f"/remember I like tea {payload}", "Noted, you like tea.")
    send(ui, "remember that I like tea")
    seen_before_reply(ui, ".progress.running .step:has-text('Tool /remember finished') .badge-ok")
    block = ui.locator(".tool-block")
    block.wait_for()
    ui.locator(".role-assistant").wait_for()
    assert "/remember I like tea" in block.locator("summary").inner_text()
    assert block.locator(".badge-ok").inner_text() == "ok"
    assert not block.locator(".tool-output").is_visible()
    block.locator("summary").click()
    assert block.get_attribute("open") is not None
    assert block.locator(".tool-output").is_visible()
    assert "tea" in block.locator(".tool-output").inner_text()
    assert ui.locator("#message-list img[src='x'], #message-list script").count() == 0
    assert "Tool /remember finished" in (ui.locator(".progress").text_content() or "")
    shot(ui, "04-tool-expanded")


def test_model_text_cannot_run_script(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue(
        "Look: <script>window.__xss=1</script> [x](javascript:window.__xss=2) "
        '<img src=x onerror=window.__xss=3> <a href="javascript:alert(4)">y</a> '
        '<svg onload=alert(5)></svg> <iframe src="javascript:alert(6)"></iframe> '
        '<p onclick=alert(7) style="position:fixed">click</p> safe end'
    )
    send(ui, "show me html")
    bubble = ui.locator(".role-assistant .bubble")
    bubble.wait_for()
    assert "safe end" in bubble.inner_text()
    injected = bubble.evaluate(
        """bubble => [...bubble.querySelectorAll('*')].filter(node =>
            ['SCRIPT', 'IFRAME', 'svg', 'OBJECT', 'EMBED'].includes(node.tagName)
            || [...node.attributes].some(a => a.name.startsWith('on') || a.name === 'style'
                 || /^\\s*javascript:/i.test(a.value))).map(node => node.outerHTML)"""
    )
    assert injected == []
    text = bubble.inner_text()  # raw HTML is shown as the text it is, not run and not dropped
    assert "<script>window.__xss=1</script>" in text and "<img src=x onerror=window.__xss=3>" in text
    assert '<a href="javascript:alert(4)">y</a>' in text and "<p onclick=alert(7)" in text
    assert bubble.locator("a").count() == 1  # the Markdown link stays, as text without an href
    for link in bubble.locator("a").all():  # clicking what is left runs nothing
        link.click(modifiers=["Control"])
    ui.wait_for_timeout(200)
    shot(ui, "05-xss-inert")


def test_provider_unavailable_offers_retry_that_resends(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue(500, 500)  # the first try and the pipeline's one retry both fail
    send(ui, "are you there?")
    error = ui.locator(".turn-error")
    error.wait_for()
    assert "Your message was kept" in error.inner_text()
    shot(ui, "06-provider-unavailable")
    llm.queue("Yes, back now.")
    error.locator(".retry-button").click()
    ui.locator(".role-assistant:has-text('Yes, back now.')").wait_for()
    assert ui.locator(".turn-error").count() == 0
    assert llm.requests[-1]["messages"][-1]["content"].endswith("are you there?")


def test_image_upload_and_generated_image_show_inline(ui: Any, llm: FakeLLMServer) -> None:
    ui.set_input_files("#image-input", {"name": "red.png", "mimeType": "image/png", "buffer": tiny_png(64, 64)})
    ui.locator(".attachment img").wait_for()
    llm.queue("A small red square.")
    send(ui, "what is in this picture?")
    ui.locator(".role-assistant:has-text('red square')").wait_for()
    uploaded = ui.locator(".role-user .image-strip img[src^='/files/uploads/']")
    uploaded.wait_for()
    ui.wait_for_function(
        "() => [...document.querySelectorAll('.image-strip img')].every(i => i.complete && i.naturalWidth > 0)"
    )
    sent = llm.requests[-1]["messages"][-1]["content"]
    assert any(part.get("type") == "image_url" for part in sent), sent  # a vision turn
    assert ui.locator(".attachment").count() == 0

    llm.queue("/imagine a red square")
    send(ui, "draw a red square")
    generated = ui.locator(".tool-block[open] img[src^='/files/generated/']")
    generated.wait_for()
    ui.wait_for_function("() => document.querySelector(\".tool-block img[src^='/files/generated/']\").naturalWidth > 0")
    shot(ui, "07-images")


def test_code_panel_runs_code_or_says_the_judge_is_unavailable(ui: Any) -> None:
    ui.click("#code-toggle")
    ui.wait_for_selector("#side-panel:not([hidden])")
    ui.fill("#run-code", "print(6 * 7)")
    ui.click("#run-button")
    result = ui.locator("#run-result .verdict, #run-result .notice-error")
    result.wait_for()
    text = result.inner_text()
    if ui.locator("#run-result .verdict").count():
        assert "Verdict" in text and "42" in text
    else:
        assert "judge_unavailable" in text or "unavailable" in text
    shot(ui, "08-code-panel")
    ui.click("#problems-toggle")
    ui.fill("#activity-id", "demo")
    ui.press("#activity-id", "Enter")
    ui.locator("#activity-status .notice, #problem-list .problem").first.wait_for()
    shot(ui, "09-problems-panel")


def test_reload_keeps_history_and_sessions_can_be_renamed_and_deleted(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue("First answer.")
    send(ui, "first question")
    ui.locator(".role-assistant:has-text('First answer.')").wait_for()
    ui.reload()
    ui.wait_for_selector("#app-view[aria-busy='false']")
    ui.locator(".role-assistant:has-text('First answer.')").wait_for()
    assert ui.locator(".role-user .bubble").first.inner_text().strip() == "first question"

    active = ui.locator(".session-item.active")
    active.locator(".session-rename").click()
    ui.fill(".rename-input", "Tea talk")
    ui.press(".rename-input", "Enter")
    ui.locator(".session-item.active .session-open:has-text('Tea talk')").wait_for()
    assert ui.locator("#session-title").inner_text() == "Tea talk"
    shot(ui, "10-sessions")

    count = ui.locator(".session-item").count()
    ui.locator(".session-item.active .session-delete").click()
    ui.locator("#delete-dialog button.danger").click()  # the delete dialog (chat_features)
    ui.wait_for_function(f"() => document.querySelectorAll('.session-item').length === {count - 1}")
    assert ui.locator("#message-list .message").count() == 0


def test_phone_layout_collapses_sessions_into_a_drawer(ui: Any, llm: FakeLLMServer) -> None:
    ui.set_viewport_size({"width": 390, "height": 844})
    llm.queue("Hi from a phone.")
    send(ui, "hello")
    ui.locator(".role-assistant").wait_for()
    assert not ui.locator("#sessions-panel").is_visible()
    assert ui.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(ui, "11-phone-chat")
    ui.click("#sessions-toggle")
    ui.wait_for_selector("#sessions-panel", state="visible")
    assert ui.get_attribute("#sessions-toggle", "aria-expanded") == "true"
    ui.wait_for_timeout(250)  # the slide-in transition
    shot(ui, "12-phone-drawer")
    ui.keyboard.press("Escape")
    ui.wait_for_selector("#sessions-panel", state="hidden")


def test_keyboard_only_user_can_reach_the_composer_and_send(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue("Typed without a mouse.")
    ui.focus("#new-session")
    for _ in range(150):  # tab forward until the message box has focus
        ui.keyboard.press("Tab")
        if ui.evaluate("document.activeElement.id") == "composer-input":
            break
    else:
        pytest.fail("Tab never reached the message box")
    ui.keyboard.type("hello keyboard")
    ui.keyboard.press("Enter")
    ui.locator(".role-assistant:has-text('Typed without a mouse.')").wait_for()
    labelled = ui.evaluate(
        "[...document.querySelectorAll('#app-view button, #app-view textarea, #app-view input, #app-view select')]"
        ".filter(e => e.offsetParent !== null)"
        ".filter(e => !(e.getAttribute('aria-label') || e.textContent.trim() || (e.id && document.querySelector(`label[for='${e.id}']`))))"
        ".map(e => e.outerHTML)"
    )
    assert labelled == [], f"controls without an accessible name: {labelled}"
