"""The Tasks panel speaks to people (issue 26 item 7): buttons to start, submit, ask for help
and reopen a closed task, and never an instruction to type a command such as
"Start one with /start_task <id>" (those texts are the tools' words for the model).

The project of `tests/task_support.py` is imported into this module's server with the real
`python app.py import-tasks FILE`; the page calls `POST /tools/<name>` as it always does.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.ui_support import import_tasks, rest, shot

pytestmark = [pytest.mark.browser]

COMMAND = re.compile(
    r"(?<![\w/])/(start_task|submit|get_ready|show_task|go_back|request_help|add_comment|get_context)\b"
)


@pytest.fixture(scope="module")
def imported(server: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from tests.task_support import PROJECT

    project_file = tmp_path_factory.mktemp("tasks-care") / "course.json"
    project_file.write_text(json.dumps(PROJECT))
    assert import_tasks(server, tmp_path_factory, project_file).startswith("project course")
    return server


def panel_text(ui: Any) -> str:
    return ui.locator("#tasks-panel").inner_text()


def no_commands(ui: Any) -> None:
    text = panel_text(ui)
    assert COMMAND.search(text) is None, f"the panel tells a person to type a command: {text!r}"


def open_tasks(ui: Any) -> None:
    ui.click("#tasks-toggle")
    ui.wait_for_selector("#tasks-panel:not([hidden])")
    ui.locator("#task-list .task-open").first.wait_for()


def open_task(ui: Any, task_id: str) -> Any:
    ui.locator(f"#task-list .task-open[data-task='{task_id}']").click()
    detail = ui.locator("#task-detail")
    expect(detail.locator("#task-title")).to_be_focused()
    return detail


def test_the_panel_never_shows_a_command(ui: Any, imported: dict[str, str]) -> None:
    open_tasks(ui)
    summary = ui.locator("#tasks-summary").inner_text()
    assert "ready for you" in summary and "Open one" in summary
    no_commands(ui)
    detail = open_task(ui, "warmup")
    assert "Press Start task" in detail.locator(".task-next").inner_text()
    no_commands(ui)
    detail.get_by_role("button", name="Start task").click()
    answer = detail.get_by_role("textbox", name="Your answer")
    answer.wait_for()
    assert "submit it" in detail.locator(".task-next").inner_text()
    no_commands(ui)
    answer.fill("cold")
    detail.get_by_role("button", name="Submit answer").click()
    expect(ui.locator("#task-status")).to_contain_text("did not pass; fix what failed and submit again")
    no_commands(ui)
    detail.get_by_role("textbox", name="Your answer").fill("warm")
    detail.get_by_role("button", name="Submit answer").click()
    expect(detail.locator(".task-head .badge[data-status='closed']")).to_have_count(1)
    expect(ui.locator("#task-status")).to_contain_text("is done")
    assert "Reopen it" in detail.locator(".task-next").inner_text()
    no_commands(ui)
    # the tools' own messages still name commands: they are written for the model
    assert COMMAND.search(rest(imported, "POST", "/tools/get_ready", json={})["message"] or "/get_ready")

    ui.fill("#task-open-id", "no_such_task")
    ui.press("#task-open-id", "Enter")
    expect(ui.locator("#task-status .notice-error")).to_contain_text("no task with that id")
    no_commands(ui)


def test_reopen_a_closed_task_by_keyboard(ui: Any, imported: dict[str, str]) -> None:
    state = rest(imported, "POST", "/tools/show_task", json={"task_id": "basics"})
    if state["status"] != "closed":
        rest(imported, "POST", "/tools/start_task", json={"task_id": "basics"})
        rest(imported, "POST", "/tools/submit", json={"task_id": "basics", "answer": "yes"})
    open_tasks(ui)
    ui.fill("#task-open-id", "basics")
    ui.press("#task-open-id", "Enter")
    detail = ui.locator("#task-detail")
    expect(detail.locator(".task-head .badge[data-status='closed']")).to_have_count(1)
    reopen = detail.get_by_role("button", name="Reopen task")
    reopen.focus()
    ui.keyboard.press("Enter")
    reason = detail.get_by_role("textbox", name="Why do you reopen it?")
    expect(reason).to_be_focused()
    ui.keyboard.press("Escape")  # Escape cancels and gives the focus back
    expect(reopen).to_be_focused()
    ui.keyboard.press("Enter")
    expect(reason).to_be_focused()
    ui.keyboard.type("I want to practise it again")
    shot(ui, "care-task-reopen")
    ui.keyboard.press("Tab")
    ui.keyboard.press("Enter")  # the Reopen button
    expect(detail.locator(".task-head .badge[data-status='in_progress']")).to_have_count(1)
    expect(ui.locator("#task-status")).to_contain_text("Reopened “Basics”")
    expect(detail.get_by_role("textbox", name="Your answer")).to_be_focused()
    history = detail.locator(".task-history")
    expect(history).to_contain_text("Reopened: closed → in progress")
    expect(history).to_contain_text("I want to practise it again")
    no_commands(ui)
    events = rest(imported, "POST", "/tools/show_task", json={"task_id": "basics"})["history"]
    assert (events[-1]["action"], events[-1]["from_status"], events[-1]["to_status"], events[-1]["reason"]) == (
        "go_back",
        "closed",
        "in_progress",
        "I want to practise it again",
    )
    shot(ui, "care-task-reopened")


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}])
def test_ask_for_help_with_a_button(ui: Any, imported: dict[str, str], viewport: dict[str, int]) -> None:
    ui.set_viewport_size(viewport)
    open_tasks(ui)
    task_id = "essay_intro" if viewport["width"] > 400 else "essay"
    ui.fill("#task-open-id", task_id)
    ui.press("#task-open-id", "Enter")
    detail = ui.locator("#task-detail")
    detail.locator("#task-title").wait_for()
    detail.get_by_role("button", name="Ask for help").click()
    question = detail.get_by_role("textbox", name="What are you stuck on?")
    expect(question).to_be_focused()
    question.fill("I do not know how to begin")
    shot(ui, f"care-task-help-{viewport['width']}")
    detail.get_by_role("button", name="Send to an instructor").click()
    expect(ui.locator("#task-status")).to_contain_text("is sent; an instructor will answer")
    no_commands(ui)
    detail.get_by_role("button", name="Ask for help").click()  # once more: one open request per task
    detail.get_by_role("textbox", name="What are you stuck on?").fill("still stuck")
    detail.get_by_role("button", name="Send to an instructor").click()
    expect(ui.locator("#task-status .notice-error")).to_contain_text("You already asked for help")
    no_commands(ui)
