"""What makes the page fast, as behaviour (issue 26, Speed; the figures are bench/ui.py's).

- the page loads its code at once: the bundle set-up builds (one file), or without it every
  module named up front (modulepreload), so none waits for the module that imports it;
  highlight.js and KaTeX load only when a code block or a formula shows up, and colour or draw
  it in place then;
- a streamed answer is redrawn at most once per frame, however many pieces arrive, and only
  its unfinished end is parsed again each time: the Markdown parsed over the whole stream is
  bounded by the answer's length plus, per frame, its longest block, not by the answer's
  length per frame (which made each frame of a long answer slower than the last);
- the conversations list is asked for together with the signed-in user, not after it;
- the page marks when the chat is usable and when an opened chat is drawn (the bench's marks).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from testing.fake_llm import FakeLLMServer, StreamReply
from tests.ui_support import TIMEOUT_MS, send

pytestmark = [pytest.mark.browser]

PARAGRAPH = "A **mean** adds the values and divides by their count; see [notes](https://example.org/n) and `median`."
CODE = "```python\ndef mean(values):\n    return sum(values) / len(values)\n```"
LAZY = {"/static/vendor/highlight.min.js", "/static/vendor/katex/katex.mjs"}  # loaded on first use
TABLE = "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | {i * i} |" for i in range(10))
BLOCKS = [block for i in range(6) for block in (f"## Part {i + 1}", PARAGRAPH, CODE, TABLE)]
ANSWER = "\n\n".join(BLOCKS)


def mark_detail(page: Any, name: str) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while True:
        detail = page.evaluate("(n) => performance.getEntriesByName(n).at(-1)?.detail ?? null", name)
        if detail is not None:
            return dict(detail)
        assert time.monotonic() < deadline, f"no {name!r} mark"
        time.sleep(0.02)


def test_the_page_loads_its_code_at_once(ui: Any) -> None:
    """With the bundle (what set-up builds): the page's scripts are the theme's and the bundle,
    nothing else before the chat is usable. Without it: every module's fetch starts before
    app.js has even arrived, none waits for its importer."""
    ui.reload()  # a page load of its own (the fixture's sign-in loaded the page before)
    ui.wait_for_selector("#app-view[aria-busy='false']")
    timing = ui.evaluate(
        """() => performance.getEntriesByType('resource')
            .filter((e) => /\\/static\\/.*\\.m?js$/.test(e.name))
            .map((e) => [new URL(e.name).pathname, e.startTime, e.responseEnd])"""
    )
    scripts = {path for path, _, _ in timing} - LAZY
    if "/static/dist/app.js" in scripts:
        assert scripts == {"/static/js/theme_boot.js", "/static/dist/app.js"}, scripts
    else:
        entry = {path: end for path, _, end in timing}["/static/js/app.js"]
        modules = {path: start for path, start, _ in timing if path not in {"/static/js/app.js", *LAZY}}
        assert len(modules) > 10
        late = sorted(path for path, start in modules.items() if start >= entry)
        assert late == [], f"modules fetched only once app.js had arrived: {late}"
    assert ui.evaluate("performance.getEntriesByName('chat-usable').length") == 1


def loaded_scripts(page: Any) -> set[str]:
    return set(
        page.evaluate(
            """() => performance.getEntriesByType('resource')
                .filter((e) => /\\/static\\/.*\\.m?js$/.test(e.name)).map((e) => new URL(e.name).pathname)"""
        )
    )


def test_highlighting_and_math_load_with_the_first_code_block_and_formula(ui: Any, llm: FakeLLMServer) -> None:
    """A chat without code or math never fetches highlight.js or KaTeX; the first answer with
    both fetches them, and its code is coloured and its formula drawn in place."""
    ui.reload()
    ui.wait_for_selector("#app-view[aria-busy='false']")
    ui.click("#new-session")
    ui.wait_for_selector("#app-view[aria-busy='false']")
    ui.wait_for_selector("#message-list .message", state="detached")  # the new chat is on screen
    llm.queue("Plain words, no code and no math.")
    send(ui, "hello")
    ui.locator(".role-assistant:has-text('Plain words')").wait_for()
    assert loaded_scripts(ui).isdisjoint(LAZY)
    llm.queue(f"The mean is $\\bar x = \\frac{{1}}{{n}}\\sum x_i$.\n\n{CODE}")
    send(ui, "the mean?")
    ui.locator(".role-assistant .math-inline math").wait_for(timeout=TIMEOUT_MS)
    ui.locator(".role-assistant .code-block code .hljs-keyword").first.wait_for(timeout=TIMEOUT_MS)
    assert loaded_scripts(ui) >= LAZY
    assert ui.locator(".role-assistant code[data-highlight]").count() == 0
    assert ui.locator(".role-assistant code.language-katex").count() == 0


def test_the_conversations_are_asked_for_with_the_user_not_after(ui: Any) -> None:
    ui.reload()
    ui.wait_for_selector("#app-view[aria-busy='false']")
    timing = ui.evaluate(
        """() => Object.fromEntries(performance.getEntriesByType('resource')
            .filter((e) => ['/api/me', '/sessions'].includes(new URL(e.name).pathname))
            .map((e) => [new URL(e.name).pathname, [e.startTime, e.responseEnd]]))"""
    )
    assert timing["/sessions"][0] < timing["/api/me"][1], timing


def test_a_streamed_answer_is_redrawn_per_frame_and_parsed_per_block(ui: Any, llm: FakeLLMServer) -> None:
    pieces = tuple(ANSWER[i : i + 4] for i in range(0, len(ANSWER), 4))
    ui.evaluate(
        """() => { window.__frames = 0;
            const tick = () => { window.__frames += 1; if (!window.__framesDone) requestAnimationFrame(tick); };
            requestAnimationFrame(tick); }"""
    )
    llm.queue(StreamReply(pieces=pieces, delay_s=0.002))
    send(ui, "explain at length")
    drawn = mark_detail(ui, "answer-drawn")
    frames = ui.evaluate("window.__framesDone = true; window.__frames")
    ui.locator(".role-assistant:has-text('Part 6')").wait_for()
    assert drawn["chars"] == len(ANSWER)
    assert 1 <= drawn["renders"] <= frames + 1, drawn
    assert drawn["renders"] <= drawn["deltas"], drawn
    longest = max(len(block) for block in BLOCKS)
    # the settled text once, then per frame at most the block being written, the one before
    # it (settled once the next one's first line is complete) and a line
    assert drawn["parsed"] <= len(ANSWER) + drawn["renders"] * (2 * longest + 100), drawn
    # what the user sees at the end is the stored answer, drawn whole
    assert ui.locator(".role-assistant .code-block").count() == 6
    assert ui.locator(".role-assistant table").count() == 6


def test_opening_a_chat_marks_when_its_messages_are_drawn(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue(f"{PARAGRAPH}\n\n{CODE}")
    send(ui, "hello")
    ui.locator(".role-assistant .code-block").wait_for()
    before = ui.evaluate("performance.now()")
    ui.reload()
    ui.wait_for_selector("#app-view[aria-busy='false']")
    shown = mark_detail(ui, "messages-shown")
    assert shown["count"] == ui.locator("#message-list > *").count() >= 2
    assert before >= 0
