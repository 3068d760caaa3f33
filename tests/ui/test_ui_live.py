"""Live turns in a real browser (issue "Live turns", part 6; SPEC 7 and 7a).

The answer grows as the model writes it (`answer.delta`), Stop keeps what was shown, a
reload or a switch of chats mid-turn picks the turn up again and its answer lands in its own
chat, raw HTML in model text is shown as text, Retry leaves one copy of the message, and a
dropped connection or a `replay.gap` is recovered from. The fake model streams scripted
pieces (`StreamReply`) slowly enough that the test sees the turn while it runs; no test
asserts how long anything took. Same real server and chromium as tests/ui/test_ui_browser.py.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from testing.fake_llm import FakeLLMServer, StreamReply
from tests.ui_support import open_session_id, rest, send, shot, wait_turn_over, wait_turn_running

pytestmark = [pytest.mark.browser]

LIVE = ".live-answer .bubble"
STORED = ".role-assistant .bubble"


def slow(*pieces: str, delay_s: float = 0.4) -> StreamReply:
    return StreamReply(pieces=pieces, delay_s=delay_s)


def wait_live(page: Any, text: str) -> None:
    """`text` shows in the answer being written, and the turn has not ended yet. Checked in
    the page at every frame: a piece may be on screen for less than Playwright's polling gap."""
    page.wait_for_function(
        "text => [...document.querySelectorAll('.live-answer .bubble')].some(b => b.textContent.includes(text))",
        arg=text,
        polling="raf",
    )
    assert page.locator(".role-assistant").count() == 0, "the stored answer came before the live one was seen"


def test_answer_grows_piece_by_piece_before_done(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue(
        slow(
            "Streaming **answer** starts.\n\n",
            "```python\nfor i in range(3):\n",
            "    print(i)\n",
            "```\n\nMore text",
            " and the **end**.",
        )
    )
    send(ui, "stream something")
    wait_live(ui, "Streaming answer starts.")
    assert ui.locator(f"{LIVE} strong").first.inner_text() == "answer"  # Markdown while it grows
    assert ui.get_by_role("button", name="Stop the answer").is_visible()
    assert ui.locator("#send-button").is_hidden()

    # An unfinished code fence runs to the end of the text; the page stays whole.
    ui.locator(f"{LIVE} .code-block code:has-text('for i in range(3):')").wait_for()
    wait_live(ui, "for i in range(3):")
    assert ui.locator("#composer-input").is_visible()
    shot(ui, "20-live-streaming")

    ui.locator(f"{STORED}:has-text('and the end.')").wait_for()
    assert ui.locator(".live-answer").count() == 0  # replaced by the stored message
    reply = ui.locator(".role-assistant")
    assert reply.count() == 1 and reply.get_attribute("data-id")
    assert reply.locator("code.hljs").inner_text().strip() == "for i in range(3):\n    print(i)"
    assert ui.locator("#send-button").is_visible() and ui.locator("#stop-button").is_hidden()
    assert ui.locator(".progress").get_attribute("open") is None  # the steps folded
    shot(ui, "21-live-done")


def test_first_paragraph_is_not_redrawn_while_the_answer_grows(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue(
        slow("First paragraph.\n\n", "Second", " paragraph", " grows", " here", " and", " there", " and", " ends.")
    )
    send(ui, "two paragraphs")
    wait_live(ui, "First paragraph.")
    ui.evaluate(f"document.querySelector('{LIVE} p').__kept = true")
    wait_live(ui, "Second paragraph grows")
    assert ui.evaluate(f"document.querySelector('{LIVE} p').__kept") is True
    ui.locator(f"{STORED}:has-text('and ends.')").wait_for()


def test_answer_reset_clears_what_was_shown_before_the_retry(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue(
        StreamReply(pieces=("Broken ", "answer ", "that ", "never ends"), delay_s=0.4, error_after=2),
        slow("Fresh ", "answer ", "from ", "the ", "retry."),
    )
    send(ui, "fail halfway")
    wait_live(ui, "Broken")
    wait_live(ui, "Fresh answer")  # after answer.reset, only the retry's text
    assert "Broken" not in ui.locator(LIVE).inner_text()
    ui.locator(f"{STORED}:has-text('from the retry.')").wait_for()
    assert ui.locator(STORED).inner_text().strip() == "Fresh answer from the retry."
    assert "The answer broke off" in (ui.locator(".progress").text_content() or "")
    shot(ui, "32-live-reset")


def test_stop_keeps_the_partial_answer_marked_as_stopped(ui: Any, llm: FakeLLMServer, server: dict[str, str]) -> None:
    pieces = tuple(f"Part {n}. " for n in range(1, 30))
    llm.queue(slow(*pieces, delay_s=0.3))
    send(ui, "write a long answer")
    wait_live(ui, "Part 2.")
    stop = ui.get_by_role("button", name="Stop the answer")
    stop.focus()
    ui.keyboard.press("Enter")  # keyboard accessible
    stopped = ui.locator(".role-assistant .stopped-note")
    stopped.wait_for()
    text = ui.locator(STORED).inner_text()
    assert text.startswith("Part 1. Part 2.") and "Part 29." not in text
    assert "stopped" in stopped.inner_text().lower()
    assert (ui.locator(".progress .progress-title").inner_text()).startswith("Stopped")
    assert ui.locator("#send-button").is_visible() and ui.locator("#stop-button").is_hidden()
    assert ui.evaluate("document.activeElement.id") == "composer-input"  # focus not lost
    session_id = open_session_id(ui)
    stored = rest(server, "GET", f"/sessions/{session_id}/messages")["messages"]
    assert stored[-1]["role"] == "assistant" and stored[-1]["meta"]["stopped"] is True
    assert stored[-1]["content"].strip() == text.strip()
    shot(ui, "22-live-stopped")

    ui.reload()  # the marker is part of the stored message
    ui.wait_for_selector("#app-view[aria-busy='false']")
    ui.locator(".role-assistant .stopped-note").wait_for()


def test_reload_mid_turn_follows_the_turn_to_its_answer(ui: Any, llm: FakeLLMServer) -> None:
    pieces = ("Reloaded ", "pages ", "pick ", "the ", "turn ", "up ", "again ", "and ", "see ", "the ", "end.")
    llm.queue(slow(*pieces, delay_s=0.4))
    send(ui, "survive a reload")
    wait_live(ui, "Reloaded pages")
    ui.reload()
    ui.wait_for_selector("#app-view[aria-busy='false']")
    # GET /sessions/<id> has an active_turn: the page follows it from its first event.
    ui.locator(f"{LIVE}:has-text('Reloaded pages pick')").wait_for()
    assert ui.locator(".progress.running").count() == 1
    assert ui.get_by_role("button", name="Stop the answer").is_visible()
    shot(ui, "23-live-reconnected")
    ui.locator(f"{STORED}:has-text('again and see the end.')").wait_for()
    assert ui.locator(STORED).inner_text().strip() == "".join(pieces).strip()
    assert ui.locator(".role-user").count() == 1
    assert ui.locator(".live-answer").count() == 0


def test_switching_chats_mid_turn_keeps_the_answer_in_its_own_chat(
    ui: Any, llm: FakeLLMServer, server: dict[str, str]
) -> None:
    pieces = tuple(f"Tea fact {n}. " for n in range(1, 16))
    llm.queue(slow(*pieces, delay_s=0.3))
    first = open_session_id(ui)
    send(ui, "tell me about tea")
    wait_live(ui, "Tea fact 1.")

    ui.click("#new-session")  # chat B, while A's turn runs
    ui.wait_for_selector("#app-view[aria-busy='false']")
    second = open_session_id(ui)
    assert second != first
    assert ui.locator("#message-list > *").count() == 0
    assert ui.locator("#send-button").is_visible()  # B has no turn running: it can send

    ui.click(f".session-item[data-session-id='{first}'] .session-open")  # back to A mid-turn
    ui.wait_for_selector("#app-view[aria-busy='false']")
    assert open_session_id(ui) == first
    ui.locator(f"{LIVE}:has-text('Tea fact 3.')").wait_for()  # the same turn, still growing
    assert ui.locator(".role-user").count() == 1

    ui.click(f".session-item[data-session-id='{second}'] .session-open")  # to B again, and wait there
    ui.wait_for_selector("#app-view[aria-busy='false']")
    assert open_session_id(ui) == second
    wait_turn_over(server, first)
    ui.wait_for_timeout(300)  # the done event reaches the page
    assert ui.locator("#message-list > *").count() == 0  # nothing of A's turn landed in B
    shot(ui, "24-live-other-chat-untouched")

    names = {session["id"]: session["name"] for session in rest(server, "GET", "/sessions")["sessions"]}
    assert names[second] == "New chat"  # the chat on screen was not renamed
    assert names[first] == "tell me about tea"
    assert rest(server, "GET", f"/sessions/{second}/messages")["messages"] == []

    llm.queue("B answers on its own.")
    send(ui, "a question for B")
    ui.locator(f"{STORED}:has-text('B answers on its own.')").wait_for()
    assert [m["role"] for m in rest(server, "GET", f"/sessions/{second}/messages")["messages"]] == ["user", "assistant"]

    ui.click(f".session-item[data-session-id='{first}'] .session-open")
    ui.wait_for_selector("#app-view[aria-busy='false']")
    ui.locator(f"{STORED}:has-text('Tea fact 15.')").wait_for()
    assert ui.locator(".role-user .bubble").all_inner_texts() == ["tell me about tea"]
    shot(ui, "25-live-own-chat")


def test_raw_html_in_model_text_is_shown_as_text(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue(
        slow(
            "Use a List<Str",
            "ing> here; note a<b an",
            "d b>c.\n\n",
            "**Bold** stays bold, <b>this</b> does not, ",
            "and `x<y>` is code.\n\n<div>\nblock html\n</div>\n",
            delay_s=0.2,
        )
    )
    send(ui, "generics please")
    bubble = ui.locator(STORED)
    bubble.wait_for()
    text = bubble.inner_text()
    assert "Use a List<String> here; note a<b and b>c." in text
    assert "<b>this</b> does not" in text and "<div>" in text and "block html" in text
    assert bubble.locator("strong").inner_text() == "Bold"
    assert bubble.locator("code").inner_text() == "x<y>"
    assert bubble.locator("b, div, string").count() == 0
    shot(ui, "26-live-raw-html-as-text")


def test_retry_after_a_failure_leaves_one_copy_of_the_message(
    ui: Any, llm: FakeLLMServer, server: dict[str, str]
) -> None:
    llm.queue(500, 500)  # the first try and the pipeline's one retry both fail
    send(ui, "are you there?")
    error = ui.locator(".turn-error")
    error.wait_for()
    assert ui.locator(".role-user").count() == 1
    llm.queue(slow("Yes, ", "back ", "now", ", ", "all ", "good."))
    error.locator(".retry-button").click()
    wait_live(ui, "Yes, back")
    assert ui.locator(".role-user").count() == 1  # the same bubble, not a second one
    ui.locator(f"{STORED}:has-text('Yes, back now, all good.')").wait_for()
    assert ui.locator(".turn-error").count() == 0
    assert ui.locator(".role-user .bubble").all_inner_texts() == ["are you there?"]
    shot(ui, "27-live-retry-one-copy")

    # The Retry answered the stored message again (`retry_of`): it is stored once.
    stored = rest(server, "GET", f"/sessions/{open_session_id(ui)}/messages")["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    ui.reload()
    ui.wait_for_selector("#app-view[aria-busy='false']")
    ui.locator(f"{STORED}:has-text('Yes, back now, all good.')").wait_for()
    assert ui.locator(".role-user .bubble").all_inner_texts() == ["are you there?"]


def test_script_in_streamed_model_text_never_runs(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue(
        slow(
            "Careful: <img src=x onerr",
            "or=window.__xss=1> and <scr",
            "ipt>window.__xss=2</script> ",
            "[link](javascript:window.__xss=3) ",
            "<svg onload=window.__xss=4></svg> ",
            "and ",
            "so ",
            "on, ",
            "done.",
            delay_s=0.3,
        )
    )
    send(ui, "try to break the page")
    wait_live(ui, "Careful:")
    wait_live(ui, "<script>")
    assert ui.locator("#message-list img[src='x'], #message-list script, #message-list svg").count() == 0
    bubble = ui.locator(f"{STORED}:has-text('done.')")
    bubble.wait_for()
    text = bubble.inner_text()
    assert "<img src=x onerror=window.__xss=1>" in text and "<script>window.__xss=2</script>" in text
    assert ui.locator("#message-list img[src='x'], #message-list script, #message-list svg").count() == 0
    assert bubble.locator("a").get_attribute("href") is None
    bubble.locator("a").click(modifiers=["Control"])
    ui.wait_for_timeout(200)
    assert ui.evaluate("window.__xss") is None
    shot(ui, "28-live-xss-inert")


def test_dropped_connection_resumes_after_the_last_event_seen(ui: Any, llm: FakeLLMServer) -> None:
    """POST /chat's stream is cut after its first answer piece; the page reconnects to
    GET /sessions/<id>/generate/stream with Last-Event-ID and gets the rest, once."""
    llm.queue(slow("Half ", "of it, ", "then the ", "rest.", delay_s=0.2))
    cut: dict[str, Any] = {}

    def cut_after_first_delta(route: Any) -> None:
        response = route.fetch()  # the whole real stream (the turn runs to its end)
        blocks = response.text().split("\n\n")
        kept = []
        for block in blocks:
            kept.append(block)
            if "event: answer.delta" in block:
                break
        cut["last_id"] = next(line[4:] for line in kept[-1].splitlines() if line.startswith("id: "))
        route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body="\n\n".join(kept) + "\n\n")

    follows: list[dict[str, str]] = []
    ui.on("request", lambda request: follows.append(request.headers) if "/generate/stream" in request.url else None)
    ui.route("**/chat", cut_after_first_delta)
    send(ui, "cut me off")
    ui.locator(f"{STORED}:has-text('then the rest.')").wait_for()
    assert ui.locator(STORED).inner_text().strip() == "Half of it, then the rest."
    assert follows and follows[0].get("last-event-id") == cut["last_id"]
    assert ui.locator(".turn-error").count() == 0 and ui.locator(".role-user").count() == 1
    shot(ui, "29-live-resumed")


def test_replay_gap_reloads_the_messages_and_keeps_following(ui: Any, llm: FakeLLMServer) -> None:
    """A follower told that events were lost (`replay.gap`) loads the chat's messages again
    and still shows the turn's end."""
    llm.queue(slow("Gap ", "or ", "no gap, ", "the answer ", "arrives.", delay_s=0.3))
    send(ui, "mind the gap")
    wait_live(ui, "Gap")

    def with_gap(route: Any) -> None:
        response = route.fetch()
        gap = 'id: 1\nevent: replay.gap\ndata: {"after": 0, "oldest": 1}\n\n'
        route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body=gap + response.text())

    pages: list[str] = []
    ui.route("**/generate/stream*", with_gap)
    ui.on("request", lambda request: pages.append(request.url) if "/messages" in request.url else None)
    ui.reload()
    ui.wait_for_selector("#app-view[aria-busy='false']")
    ui.locator(f"{STORED}:has-text('the answer arrives.')").wait_for()
    assert len(pages) >= 2  # opening the chat, then again for the gap
    assert ui.locator(".role-user").count() == 1 and ui.locator(".role-assistant").count() == 1
    assert ui.locator(".turn-error").count() == 0
    shot(ui, "30-live-replay-gap")


def test_view_follows_the_answer_only_while_the_user_is_at_the_bottom(ui: Any, llm: FakeLLMServer) -> None:
    ui.set_viewport_size({"width": 900, "height": 500})
    paragraphs = tuple(f"Paragraph {n}: " + "words " * 40 + "\n\n" for n in range(1, 40))
    llm.queue(slow(*paragraphs, delay_s=0.15))
    send(ui, "a very long answer")
    wait_live(ui, "Paragraph 6:")
    at_bottom = "(() => { const b = document.getElementById('messages'); return b.scrollHeight - b.scrollTop - b.clientHeight <= 48; })()"
    assert ui.evaluate(at_bottom)  # pinned while the user stays at the bottom
    ui.evaluate("document.getElementById('messages').scrollTop = 0")  # the user scrolls up to read
    wait_live(ui, "Paragraph 12:")
    assert ui.evaluate("document.getElementById('messages').scrollTop") == 0  # left where the user is
    ui.evaluate("const b = document.getElementById('messages'); b.scrollTop = b.scrollHeight")  # back down
    wait_live(ui, "Paragraph 18:")
    assert ui.evaluate(at_bottom)
    ui.get_by_role("button", name="Stop the answer").click()
    ui.locator(".role-assistant .stopped-note").wait_for()


def test_stop_before_any_text_stores_no_answer(ui: Any, llm: FakeLLMServer, server: dict[str, str]) -> None:
    llm.reset(delay_s=3)  # the model takes its time before the first piece
    llm.queue("Too late.")
    send(ui, "never mind")
    ui.locator(".progress.running .step.running:has-text('Calling the model')").wait_for()
    ui.get_by_role("button", name="Stop the answer").click()
    ui.locator(".stopped-empty").wait_for()
    assert ui.locator(".role-assistant, .live-answer").count() == 0
    assert ui.locator(".progress .progress-title").inner_text().startswith("Stopped")
    roles = [m["role"] for m in rest(server, "GET", f"/sessions/{open_session_id(ui)}/messages")["messages"]]
    assert roles == ["user"]


def test_first_message_from_a_blank_screen_creates_its_chat(
    ui: Any, llm: FakeLLMServer, server: dict[str, str]
) -> None:
    ui.locator(".session-item.active .session-delete").click()  # no chat open any more
    ui.locator("#delete-dialog button.danger").click()  # the delete dialog (chat_features)
    ui.wait_for_function("() => localStorage.getItem('orchestrator.lastSession') === null")
    llm.queue(slow("A new ", "chat ", "is ", "born ", "right ", "here."))
    send(ui, "hello from nowhere")
    wait_live(ui, "A new")
    ui.locator(".session-item.active").wait_for()  # turn.started named the chat it created
    session_id = open_session_id(ui)
    ui.locator(f"{STORED}:has-text('born right here.')").wait_for()
    assert rest(server, "GET", f"/sessions/{session_id}")["name"] == "hello from nowhere"
    ui.reload()
    ui.wait_for_selector("#app-view[aria-busy='false']")
    ui.locator(f"{STORED}:has-text('A new chat is born right here.')").wait_for()


def test_a_turn_started_in_another_tab_is_followed_not_doubled(
    ui: Any, llm: FakeLLMServer, server: dict[str, str]
) -> None:
    session_id = open_session_id(ui)
    llm.queue(slow("Answer ", "to the ", "other ", "tab, ", "written ", "slowly.", delay_s=0.4))
    other = threading.Thread(
        target=rest,
        args=(server, "POST", "/chat"),
        kwargs={"json": {"message": "from the other tab", "session_id": session_id}},
    )
    other.start()
    try:
        wait_turn_running(server, session_id)
        send(ui, "from this tab")  # 409 turn_in_progress: the page follows the running turn
        ui.locator(".notice:has-text('still answering')").wait_for()
        assert ui.input_value("#composer-input") == "from this tab"  # nothing was lost
        ui.locator(f"{LIVE}:has-text('to the')").wait_for()
        ui.locator(f"{STORED}:has-text('written slowly.')").wait_for()
    finally:
        other.join(10)
    assert ui.locator(".role-user .bubble").all_inner_texts() == ["from the other tab"]
    roles = [m["role"] for m in rest(server, "GET", f"/sessions/{session_id}/messages")["messages"]]
    assert roles == ["user", "assistant"]
    shot(ui, "31-live-other-tab")
