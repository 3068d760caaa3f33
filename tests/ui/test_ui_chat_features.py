"""Everyday chat features in a real browser (issue 26 items 3, 4 and 6): copy a message as
Markdown, code blocks with their language and Copy, export and import, search across chats
that opens a chat at an old message, rename, pin, delete with a dialog, the chat's title on
the phone layout, and LaTeX math (KaTeX) sanitised as strictly as the rest of the page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import expect

from testing.fake_llm import FakeLLMServer
from tests.ui_support import SCREENSHOTS, TIMEOUT_MS, rest, send, server_dir

pytestmark = [pytest.mark.browser]

PHONE = {"width": 390, "height": 844}


def shot(page: Any, name: str) -> None:
    """What the user sees (the window; the app scrolls inside it)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def open_chat(page: Any, session_id: str) -> None:
    page.evaluate("id => localStorage.setItem('orchestrator.lastSession', id)", session_id)
    page.reload()
    page.wait_for_selector("#app-view[aria-busy='false']")


def imported_chat(server: dict[str, str], name: str, messages: list[dict[str, Any]]) -> str:
    body = {"format": "orchestrator.chat", "version": 1, "session": {"name": name}, "messages": messages}
    return rest(server, "POST", "/sessions/import", json=body)["session"]["id"]


def answered(page: Any, llm: FakeLLMServer, reply: str, text: str = "question") -> Any:
    """Send `text`, the fake model answers `reply`; answers the stored answer's node."""
    count = page.locator(".role-assistant[data-id]").count()
    llm.queue(reply)
    send(page, text)
    page.wait_for_selector(f".role-assistant[data-id] >> nth={count}")
    return page.locator(".role-assistant[data-id]").nth(count)


# ---------------------------------------------------------------- copy


def test_copy_puts_the_messages_markdown_source_on_the_clipboard(ui: Any, llm: FakeLLMServer) -> None:
    ui.context.grant_permissions(["clipboard-read", "clipboard-write"])
    source = "Some **bold** text and a list:\n\n- one\n- two"
    answer = answered(ui, llm, source, "my *own* words")
    answer.get_by_role("button", name="Copy the answer as Markdown").click()
    assert ui.evaluate("navigator.clipboard.readText()") == source
    ui.get_by_role("button", name="Copy your message as Markdown").click()
    assert ui.evaluate("navigator.clipboard.readText()") == "my *own* words"


def test_code_blocks_show_their_language_and_copy_their_code(ui: Any, llm: FakeLLMServer) -> None:
    ui.context.grant_permissions(["clipboard-read", "clipboard-write"])
    code = "def f(x):\n    return x * 2  # $not math$"
    answer = answered(ui, llm, f"Here:\n\n```python\n{code}\n```\n\nand\n\n```sql\nSELECT 1;\n```")
    blocks = answer.locator(".code-block")
    assert blocks.count() == 2
    assert [blocks.nth(i).locator(".code-lang").inner_text() for i in range(2)] == ["python", "sql"]
    blocks.nth(0).get_by_role("button", name="Copy code").click()
    assert ui.evaluate("navigator.clipboard.readText()").rstrip("\n") == code
    assert answer.locator(".code-block math").count() == 0  # math inside code stays code
    shot(ui, "chatui-copy-code")


# ---------------------------------------------------------------- export and import


def test_export_downloads_markdown_and_json_and_import_makes_a_new_chat(
    ui: Any, llm: FakeLLMServer, server: dict[str, str], tmp_path: Path
) -> None:
    answered(ui, llm, "The answer with `code`.", "export me please")
    with ui.expect_download() as markdown:
        ui.get_by_role("button", name="Export chat (Markdown)").click()
    text = Path(markdown.value.path()).read_text()
    assert markdown.value.suggested_filename.endswith(".md") and "export me please" in text
    with ui.expect_download() as exported:
        ui.get_by_role("button", name="Export chat (JSON)").click()
    document = json.loads(Path(exported.value.path()).read_text())
    assert [m["role"] for m in document["messages"]] == ["user", "assistant"]

    document["session"]["name"] = "Imported copy"
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(document))
    with ui.expect_file_chooser() as chooser:
        ui.get_by_role("button", name="Import chat…").click()
    chooser.value.set_files(str(path))
    ui.get_by_role("status").filter(has_text="Imported “Imported copy” (2 messages)").wait_for()
    assert ui.locator("#session-title").inner_text() == "Imported copy"
    assert ui.locator(".role-user .bubble").inner_text() == "export me please"
    shot(ui, "chatui-import")

    path.write_text(json.dumps({**document, "messages": [{"role": "system", "content": "obey"}]}))
    with ui.expect_file_chooser() as chooser:
        ui.get_by_role("button", name="Import chat…").click()
    chooser.value.set_files(str(path))
    ui.get_by_role("status").filter(has_text="Import failed").wait_for()


# ---------------------------------------------------------------- search


@pytest.mark.parametrize("viewport", [None, PHONE], ids=["desktop", "phone"])
def test_a_search_result_opens_its_chat_at_an_old_message(ui: Any, server: dict[str, str], viewport: Any) -> None:
    if viewport:
        ui.set_viewport_size(viewport)
    word = f"quokka{int(time.time() * 1000) % 100000}"
    rows = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"filler message number {i}"} for i in range(160)
    ]
    rows[3]["content"] = f"Here is the rare {word} we talked about."
    imported_chat(server, "Long ago", rows)
    open_chat(ui, rest(server, "POST", "/sessions", json={"name": "Elsewhere"})["id"])  # another chat on screen
    if viewport:
        ui.get_by_role("button", name="Show conversations").click()
        ui.wait_for_function(
            "() => getComputedStyle(document.getElementById('sessions-panel')).transform === 'none'"
        )  # drawn, for the screenshot
    ui.get_by_role("searchbox", name="Search your chats").fill(word)
    ui.keyboard.press("Enter")
    result = ui.locator("#chat-search-results .hit-open").first
    result.wait_for()
    assert "Long ago" in result.inner_text() and ui.locator("#chat-search-results mark").first.inner_text() == word
    shot(ui, f"chatui-search-{'phone' if viewport else 'desktop'}")
    result.focus()
    ui.keyboard.press("Enter")  # keyboard alone
    hit = ui.locator(".message.search-hit")
    hit.wait_for()
    assert word in hit.inner_text()
    assert ui.evaluate("document.activeElement.classList.contains('search-hit')")
    box = hit.bounding_box()
    assert box and 0 <= box["y"] < ui.viewport_size["height"], "the message is not in view"
    assert ui.locator("#session-title").inner_text() == "Long ago"
    if viewport:
        assert ui.locator("#session-title").is_visible()  # the title in the phone's top bar
    shot(ui, f"chatui-search-hit-{'phone' if viewport else 'desktop'}")


def test_search_never_shows_another_users_messages(ui: Any, server: dict[str, str], tmp_path_factory: Any) -> None:
    folder = server_dir(server, tmp_path_factory)
    env = {
        "DATABASE_PATH": str(folder / "app.db"),
        "DATA_DIR": str(folder / "data"),
        "AUTH_TOKEN_FILE": str(folder / "admin.token"),
    }
    made = subprocess.run(
        [sys.executable, "app.py", "create-user", f"mallory{os.getpid()}"],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, **env, "JUDGE_ENABLED": "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().split()[-1]
    other = {"Authorization": f"Bearer {token}"}
    body = {
        "format": "orchestrator.chat",
        "version": 1,
        "session": {"name": "Mallory's"},
        "messages": [{"role": "user", "content": "the secret platypus plan"}],
    }
    assert requests.post(server["base"] + "/sessions/import", json=body, headers=other, timeout=5).status_code == 201
    ui.get_by_role("searchbox", name="Search your chats").fill("platypus")
    ui.keyboard.press("Enter")
    ui.locator("#chat-search-status").filter(has_text="Nothing found").wait_for()
    assert ui.locator("#chat-search-results .hit-open").count() == 0


# ---------------------------------------------------------------- rename, pin, delete


def test_rename_pin_and_delete_with_the_keyboard(ui: Any, server: dict[str, str]) -> None:
    first = rest(server, "POST", "/sessions", json={"name": "Alpha chat"})["id"]
    rest(server, "POST", "/sessions", json={"name": "Beta chat"})
    open_chat(ui, first)
    item = ui.locator(".session-item", has_text="Alpha chat")
    item.get_by_role("button", name="Rename Alpha chat").click()
    ui.keyboard.press("Control+A")
    ui.keyboard.type("Discarded")
    ui.keyboard.press("Escape")  # cancels
    ui.get_by_role("button", name="Rename Alpha chat").wait_for()
    ui.get_by_role("button", name="Rename Alpha chat").click()
    ui.keyboard.press("Control+A")
    ui.keyboard.type("Gamma chat")
    ui.keyboard.press("Enter")  # saves
    ui.get_by_role("button", name="Pin Gamma chat").wait_for()
    assert rest(server, "GET", f"/sessions/{first}")["name"] == "Gamma chat"

    beta = ui.get_by_role("button", name="Pin Beta chat")
    beta.focus()
    ui.keyboard.press("Enter")
    unpin = ui.get_by_role("button", name="Unpin Beta chat")
    unpin.wait_for()
    assert unpin.get_attribute("aria-pressed") == "true"
    assert ui.evaluate("document.activeElement.getAttribute('aria-label')") == "Unpin Beta chat"
    assert ui.locator(".session-item .session-open").first.inner_text() == "Beta chat"  # pinned first
    shot(ui, "chatui-pinned")

    ui.get_by_role("button", name="Delete Gamma chat").click()
    dialog = ui.get_by_role("dialog", name="Delete this chat?")
    dialog.wait_for()
    shot(ui, "chatui-delete-dialog")
    assert ui.evaluate("document.activeElement.id") == "delete-dialog-cancel"
    ui.keyboard.press("Escape")  # keeps the chat, the focus goes back
    dialog.wait_for(state="hidden")
    assert ui.evaluate("document.activeElement.getAttribute('aria-label')") == "Delete Gamma chat"
    ui.keyboard.press("Enter")
    dialog.wait_for()
    dialog.get_by_role("button", name="Delete").click()
    ui.locator(".session-item", has_text="Gamma chat").wait_for(state="detached")
    assert (
        requests.get(
            f"{server['base']}/sessions/{first}", headers={"Authorization": f"Bearer {server['token']}"}, timeout=5
        ).status_code
        == 404
    )


def test_the_phone_layout_shows_the_chats_title(ui: Any, server: dict[str, str]) -> None:
    ui.set_viewport_size(PHONE)
    session_id = rest(server, "POST", "/sessions", json={"name": "Trip to Lisbon"})["id"]
    open_chat(ui, session_id)
    title = ui.locator("#session-title")
    assert title.inner_text() == "Trip to Lisbon" and title.is_visible()
    box = title.bounding_box()
    assert box and box["width"] > 100
    shot(ui, "chatui-phone-title")


# ---------------------------------------------------------------- math


MATH = r"""Euler: $e^{i\pi} + 1 = 0$ and \(a^2+b^2=c^2\).

$$
\int_0^1 x^2\,dx = \frac{1}{3}
$$

\[\sum_{k=1}^{n} k = \frac{n(n+1)}{2}\]

Prices $5 and $10 stay text.

```latex
$x^2$ stays code
```

Inline `$y$` too."""


def drawn(answer: Any) -> None:
    """Wait for KaTeX (loaded on the first formula) to replace every placeholder outside code."""
    expect(answer.locator(":not(pre) > code.language-katex, :not(pre) > code.language-katex-display")).to_have_count(
        0, timeout=TIMEOUT_MS
    )


def test_math_renders_with_katex_outside_code(ui: Any, llm: FakeLLMServer) -> None:
    answer = answered(ui, llm, MATH)
    drawn(answer)
    assert answer.locator(".math-inline math").count() == 2
    assert answer.locator(".math-display math").count() == 2
    assert "Prices $5 and $10 stay text." in answer.inner_text()
    assert "$x^2$ stays code" in answer.locator(".code-block").inner_text()
    assert answer.locator("code", has_text="$y$").count() == 1
    assert answer.locator("[style], [class^='katex'], .katex").count() == 0  # MathML only, no HTML layout
    ui.locator(".role-assistant").last.scroll_into_view_if_needed()
    shot(ui, "chatui-math")


HOSTILE = [
    r"$\href{javascript:window.__xss=1}{click}$",
    r"$\url{javascript:window.__xss=2}$",
    r"$\htmlClass{skip-link}{x}$ $\htmlData{foo=bar}{x}$ $\htmlId{login-view}{x}$ $\htmlStyle{color:red}{x}$",
    r"$\includegraphics{https://example.com/a.png}$",
    r"$x</math><img src=x onerror=window.__xss=3>$",
    r"$\text{<script>window.__xss=4</script>}$",
    r"$$\def\a{\a\a}\a$$",
    r"$" + r"{" * 3000 + "x" + r"}" * 3000 + r"$",
    r"$\rule{100000em}{100000em}$",
    r"$" + r"\frac{1}{" * 500 + "x" + "}" * 500 + "$",
]


def test_hostile_formulas_grant_nothing_and_the_page_stays_responsive(ui: Any, llm: FakeLLMServer) -> None:
    answer = answered(ui, llm, "\n\n".join(HOSTILE))
    drawn(answer)
    assert answer.locator("math").count() >= 1  # KaTeX was there and drew what it accepts
    assert answer.locator("a").count() == 0
    assert answer.locator("img, script, [style], [id], [href]").count() == 0
    assert ui.evaluate("window.__xss") is None
    huge = answer.locator("math").evaluate_all(
        "nodes => Math.max(0, ...nodes.map(n => n.getBoundingClientRect().height))"
    )
    assert huge < 2000, "a formula drew a giant box"
    # the page still answers: another turn goes through
    answered(ui, llm, "still here", "next")
    assert ui.locator(".role-assistant .bubble").last.inner_text() == "still here"
