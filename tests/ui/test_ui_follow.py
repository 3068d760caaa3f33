"""Following the answer (issue 26 item 1): while an answer streams, the message list stays at
the bottom unless the user scrolled up; then "Jump to latest" shows, and following resumes
when it is clicked or the user scrolls back down. The chat is much taller than the window."""

from __future__ import annotations

from typing import Any

import pytest

from testing.fake_llm import FakeLLMServer, StreamReply
from tests.ui_support import SCREENSHOTS, rest, send

pytestmark = [pytest.mark.browser]

GAP_PX = "(b => b.scrollHeight - b.scrollTop - b.clientHeight)(document.getElementById('messages'))"
LONG = "A long earlier answer line.\n\n" * 12


def tall_chat(ui: Any, server: dict[str, str], llm: FakeLLMServer, turns: int = 12) -> str:
    """A chat many windows tall, written through the API, then opened in the page."""
    llm.reset(default_reply=LONG)
    session_id = rest(server, "POST", "/sessions", json={"name": "tall"})["id"]
    for index in range(turns):
        rest(server, "POST", "/chat", json={"message": f"question {index}", "session_id": session_id})
    ui.evaluate("id => localStorage.setItem('orchestrator.lastSession', id)", session_id)
    ui.reload()
    ui.wait_for_selector("#app-view[aria-busy='false']")
    ui.wait_for_selector(f"#message-list .message >> nth={2 * turns - 1}")
    return session_id


def streamed(pieces: int = 40, delay_s: float = 0.15) -> StreamReply:
    return StreamReply(pieces=tuple(f"Line {n} of the streamed answer.\n\n" for n in range(pieces)), delay_s=delay_s)


def max_gap_while_streaming(ui: Any) -> float:
    """The largest distance from the bottom seen at any frame until the stored answer lands."""
    return ui.evaluate(
        """() => new Promise((resolve) => {
          let worst = 0;
          const box = document.getElementById('messages');
          const tick = () => {
            worst = Math.max(worst, box.scrollHeight - box.scrollTop - box.clientHeight);
            if (document.querySelector('.role-assistant[data-id]:last-child') && !document.querySelector('.live-answer')) resolve(worst);
            else requestAnimationFrame(tick);
          };
          tick();
        })"""
    )


@pytest.mark.parametrize(
    "viewport", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}], ids=["desktop", "phone"]
)
def test_follows_a_streamed_answer_in_a_tall_chat(
    ui: Any, server: dict[str, str], llm: FakeLLMServer, viewport: dict[str, int]
) -> None:
    ui.set_viewport_size(viewport)
    tall_chat(ui, server, llm)
    assert ui.evaluate("document.getElementById('messages').scrollHeight") > 4 * viewport["height"]
    llm.queue(streamed())
    send(ui, "stream a long answer")
    ui.wait_for_selector(".live-answer")
    worst = max_gap_while_streaming(ui)
    assert worst <= 48, f"the view fell {worst}px behind the answer"
    assert ui.evaluate(GAP_PX) <= 48


@pytest.mark.parametrize(
    "viewport", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}], ids=["desktop", "phone"]
)
def test_scrolling_up_stops_following_and_jump_to_latest_resumes(
    ui: Any, server: dict[str, str], llm: FakeLLMServer, viewport: dict[str, int]
) -> None:
    ui.set_viewport_size(viewport)
    tall_chat(ui, server, llm)
    llm.queue(streamed(pieces=60, delay_s=0.2))
    send(ui, "stream a long answer")
    ui.wait_for_function("() => document.querySelectorAll('.live-answer .bubble p').length >= 3", polling="raf")
    ui.mouse.move(viewport["width"] // 2 + 100, 200)
    ui.mouse.wheel(0, -1500)  # the user reads something further up
    jump = ui.get_by_role("button", name="Jump to latest")
    jump.wait_for(state="visible")
    top = ui.evaluate("document.getElementById('messages').scrollTop")
    ui.wait_for_function("n => document.querySelectorAll('.live-answer .bubble p').length >= n", arg=8, polling="raf")
    assert ui.evaluate("document.getElementById('messages').scrollTop") == top, "the view moved while the user read"
    assert ui.evaluate(GAP_PX) > 48
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    ui.screenshot(path=str(SCREENSHOTS / f"chatui-follow-jump-{'phone' if viewport['width'] < 500 else 'desktop'}.png"))
    jump.focus()  # keyboard: the button is reachable and works with Enter
    ui.keyboard.press("Enter")
    assert jump.is_hidden()
    worst = max_gap_while_streaming(ui)  # following again until the answer is stored
    assert worst <= 48, f"the view fell {worst}px behind the answer after Jump to latest"


def test_scrolling_back_down_resumes_following(ui: Any, server: dict[str, str], llm: FakeLLMServer) -> None:
    tall_chat(ui, server, llm)
    llm.queue(streamed(pieces=60, delay_s=0.2))
    send(ui, "stream a long answer")
    ui.wait_for_function("() => document.querySelectorAll('.live-answer .bubble p').length >= 3", polling="raf")
    ui.mouse.move(700, 300)
    ui.mouse.wheel(0, -1500)
    ui.get_by_role("button", name="Jump to latest").wait_for(state="visible")
    ui.mouse.wheel(0, 100_000)  # back to the bottom by hand
    ui.get_by_role("button", name="Jump to latest").wait_for(state="hidden")
    assert max_gap_while_streaming(ui) <= 48
