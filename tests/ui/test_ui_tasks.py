"""The Tasks panel in a real browser (issue 12 part 6): imported learner tasks (SPEC 10).

The project of `tests/task_support.py` is loaded into the module's server with the real
`python app.py import-tasks FILE`; the page lists the ready tasks, opens one, starts it,
submits a wrong then a right answer, and the dependent task (a `sql_result` check) unblocks.
Everything goes through `POST /tools/<name>`, as the page does; nothing is faked.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.task_support import PROJECT, SQL_ANSWER
from tests.ui_support import import_tasks, rest, shot

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def imported(server: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    project_file = tmp_path_factory.mktemp("tasks") / "course.json"
    project_file.write_text(json.dumps(PROJECT))
    report = import_tasks(server, tmp_path_factory, project_file)
    assert report.startswith("project course: 6 created"), report
    return server


def open_tasks(ui: Any) -> None:
    ui.click("#tasks-toggle")
    ui.wait_for_selector("#tasks-panel:not([hidden])")
    assert ui.locator("#side-title").inner_text() == "Tasks"
    assert ui.get_attribute("#tasks-toggle", "aria-expanded") == "true"
    ui.locator("#task-list .task-open").first.wait_for()


def listed(ui: Any) -> list[str]:
    return [item.get_attribute("data-task") for item in ui.locator("#task-list .task-open").all()]


def test_tasks_list_open_start_and_submit(ui: Any, imported: dict[str, str]) -> None:
    open_tasks(ui)
    ready = listed(ui)
    # blocked tasks (sql_query needs basics, program needs warmup) are not offered
    assert "basics" in ready and "warmup" in ready
    assert "sql_query" not in ready and "program" not in ready
    assert "tasks ready" in ui.locator("#tasks-summary").inner_text()
    shot(ui, "63-tasks-list")

    ui.locator("#task-list .task-open[data-task='basics']").click()
    detail = ui.locator("#task-detail")
    detail.locator("#task-title").wait_for()
    assert detail.locator("#task-title").inner_text() == "Basics"
    assert ui.evaluate("document.activeElement.id") == "task-title"  # focus follows the opened task
    assert "Say yes." in detail.locator(".task-description").inner_text()
    assert "the answer is yes" in detail.locator(".criteria").inner_text()
    assert detail.locator(".task-head .badge[data-status='open']").count() == 1
    assert detail.get_by_role("textbox", name="Your answer").count() == 0  # not started yet

    detail.get_by_role("button", name="Start task").click()
    answer = detail.get_by_role("textbox", name="Your answer")
    answer.wait_for()
    assert detail.locator(".task-head .badge[data-status='in_progress']").count() == 1
    assert "Started 'Basics'." in ui.locator("#task-status").inner_text()
    assert ui.evaluate("document.activeElement.id") == "task-answer"

    answer.fill("no")
    detail.get_by_role("button", name="Submit answer").click()
    verdict = ui.locator("#task-result .task-verdict")
    verdict.wait_for()
    assert "failed" in verdict.locator(".verdict-head").inner_text()
    assert verdict.locator(".test-fail").count() == 1
    assert "did not pass" in ui.locator("#task-status").inner_text()
    assert detail.get_by_role("textbox", name="Your answer").input_value() == "no"  # kept to fix it
    assert ui.evaluate("document.activeElement.id") == "task-answer"
    shot(ui, "64-task-failed")

    detail.get_by_role("textbox", name="Your answer").fill("YES")
    detail.get_by_role("button", name="Submit answer").click()
    ui.locator("#task-result .task-verdict .test-pass").wait_for()
    assert detail.locator(".task-head .badge[data-status='closed']").count() == 1
    assert "passed" in ui.locator("#task-status").inner_text()
    assert ui.evaluate("document.activeElement.id") == "task-title"  # closed: no answer box left
    assert rest(imported, "POST", "/tools/show_task", json={"task_id": "basics"})["status"] == "closed"

    # closing basics unblocks the SQL task: the list (refreshed after submit) now offers it
    ui.locator("#task-list .task-open[data-task='sql_query']").wait_for()
    assert "basics" not in listed(ui)
    shot(ui, "65-task-passed")


def test_sql_task_shows_its_tables_and_grades_a_query(ui: Any, imported: dict[str, str]) -> None:
    state = rest(imported, "POST", "/tools/show_task", json={"task_id": "sql_query"})
    if state["status"] == "open" and state["blocked_by"]:  # run alone: close its dependency first
        rest(imported, "POST", "/tools/start_task", json={"task_id": "basics"})
        rest(imported, "POST", "/tools/submit", json={"task_id": "basics", "answer": "yes"})
    open_tasks(ui)
    # keyboard: type an id and press Enter
    ui.fill("#task-open-id", "sql_query")
    ui.press("#task-open-id", "Enter")
    detail = ui.locator("#task-detail")
    detail.locator("#task-title:has-text('Dogs')").wait_for()
    assert "CREATE TABLE pets" in detail.locator(".criteria pre").inner_text()
    start = detail.get_by_role("button", name="Start task")
    start.focus()
    ui.keyboard.press("Enter")
    answer = detail.get_by_role("textbox", name="Your answer")
    answer.wait_for()
    answer.fill(SQL_ANSWER)
    detail.get_by_role("button", name="Submit answer").click()
    ui.locator("#task-result .task-verdict").wait_for()
    assert ui.locator("#task-result .test-pass").count() == 1
    assert "[sql_result]" in ui.locator("#task-result").inner_text()
    assert detail.locator(".task-head .badge[data-status='closed']").count() == 1
    shot(ui, "66-task-sql")


def test_unknown_and_blocked_tasks_say_how_to_go_on(ui: Any, imported: dict[str, str]) -> None:
    open_tasks(ui)
    ui.fill("#task-open-id", "no_such_task")
    ui.press("#task-open-id", "Enter")
    alert = ui.locator("#task-status .notice-error")
    alert.wait_for()
    assert "no task with that id" in alert.inner_text() and "/get_ready" not in alert.inner_text()  # no commands
    assert ui.get_attribute("#task-status", "role") == "status" and ui.locator("#task-status [role]").count() == 0

    ui.fill("#task-open-id", "program")  # depends on warmup, never closed in this module
    ui.press("#task-open-id", "Enter")
    detail = ui.locator("#task-detail")
    detail.locator("#task-title:has-text('Sum')").wait_for()
    assert detail.get_by_role("button", name="Start task").is_disabled()
    assert "Blocked until you close: warmup" in detail.inner_text()
    shot(ui, "67-task-blocked")
