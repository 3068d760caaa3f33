"""Approval before a risky command in a real browser (SPEC 8, Approval; issue 25 item 4).

The model (FakeLLMServer) writes `/write_file` with a body; the page shows the approval widget
with the exact command (its line and body, as text, never as HTML) and "Run" / "Don't run";
nothing is written before the click; the answer continues the conversation, and a reload
while the question is open shows it again, still answerable.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests

from testing.fake_llm import FakeLLMServer
from tests.ui_support import XSS_MARKER, send, shot

pytestmark = [pytest.mark.browser]

BODY = f'<img src=x onerror="{XSS_MARKER}=1"> & <b>bold</b>\nsecond line'


def note(server: dict[str, str], path: str) -> str | None:
    """The file's text in the user's workspace (a direct call: it never asks), None if absent."""
    response = requests.post(
        server["base"] + "/tools/read_file",
        json={"path": path},
        headers={"Authorization": f"Bearer {server['token']}"},
        timeout=5,
    )
    return str(response.json()["content"]) if response.status_code == 200 else None


def asked(ui: Any, llm: FakeLLMServer, path: str) -> Any:
    llm.queue(f"/write_file {path}\n{BODY}")
    send(ui, "save my note")
    widget = ui.locator(".widget-approval[data-status='pending']")
    widget.wait_for()
    shows_the_command(widget, path)
    return widget


def shows_the_command(widget: Any, path: str) -> None:
    assert widget.locator(".widget-question").inner_text() == f"Allow the assistant to run /write_file {path}?"
    assert widget.locator(".widget-command").inner_text() == f"/write_file {path}\n{BODY}"
    assert widget.locator(".widget-command img, .widget-command b").count() == 0  # text, never markup
    assert widget.get_by_role("button").all_inner_texts() == ["Run", "Don't run"]


def test_run_writes_the_file_and_the_answer_continues(ui: Any, llm: FakeLLMServer, server: dict[str, str]) -> None:
    widget = asked(ui, llm, "approved.md")
    assert note(server, "approved.md") is None
    assert ui.locator(".role-tool .tool-block").count() == 0  # nothing ran, nothing to show
    shot(ui, "25-approval-pending")
    llm.queue("Saved your note.")
    widget.get_by_role("button", name="Run", exact=True).click()
    ui.locator(".role-assistant:has-text('Saved your note.')").wait_for()
    answered = ui.locator(".widget-approval[data-status='answered']")
    assert answered.locator(".widget-option.chosen").inner_text() == "Run"
    assert "Answered: Run" in answered.locator(".widget-status").inner_text()
    assert ui.locator(".role-tool .tool-block").count() == 1  # the command's own result block
    assert note(server, "approved.md") == BODY
    assert llm.requests[-1]["messages"][-1]["content"].startswith("Tool result for /write_file")
    shot(ui, "25-approval-approved")


def test_dont_run_declines_and_the_answer_continues(ui: Any, llm: FakeLLMServer, server: dict[str, str]) -> None:
    widget = asked(ui, llm, "declined.md")
    llm.queue("All right, I did not save it.")
    widget.get_by_role("button", name="Don't run").click()
    ui.locator(".role-assistant:has-text('All right, I did not save it.')").wait_for()
    answered = ui.locator(".widget-approval[data-status='answered']")
    assert answered.locator(".widget-option.chosen").inner_text() == "Don't run"
    assert note(server, "declined.md") is None
    assert "the user declined to run /write_file declined.md" in llm.requests[-1]["messages"][-1]["content"]


def test_a_reload_while_pending_shows_the_question_again(ui: Any, llm: FakeLLMServer, server: dict[str, str]) -> None:
    asked(ui, llm, "reloaded.md")
    ui.reload()
    ui.wait_for_selector("#app-view[aria-busy='false']")
    widget = ui.locator(".widget-approval[data-status='pending']")
    widget.wait_for()
    shows_the_command(widget, "reloaded.md")
    assert note(server, "reloaded.md") is None
    llm.queue("Saved after the reload.")
    widget.get_by_role("button", name="Run", exact=True).click()
    ui.locator(".role-assistant:has-text('Saved after the reload.')").wait_for()
    assert note(server, "reloaded.md") == BODY
    ui.reload()  # answered now: shown as answered, with what was chosen
    ui.wait_for_selector("#app-view[aria-busy='false']")
    answered = ui.locator(".widget-approval[data-status='answered']")
    answered.wait_for()
    assert answered.locator(".widget-option.chosen").inner_text() == "Run"
