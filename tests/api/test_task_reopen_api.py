"""Reopening a closed task from the Tasks panel: `POST /tools/go_back` (the panel's Reopen
button), scoped to the caller's own progress and recorded in the task's status history."""

from __future__ import annotations

from typing import Any

import pytest

from api.services import services_of
from learner.importer import import_project
from learner.spec import ProjectFile
from tests.conftest import new_token
from tests.task_support import PROJECT


@pytest.fixture
def base_settings(base_settings: dict[str, Any], backend_settings: dict[str, str]) -> dict[str, Any]:
    """On both backends: SQLite and PostgreSQL (tests/pg_support.py)."""
    return {**base_settings, **backend_settings}


@pytest.fixture
def course(app):
    with services_of(app).database.connection() as conn:
        import_project(conn, ProjectFile.model_validate(PROJECT))


@pytest.fixture
def bob(app):
    return {"Authorization": f"Bearer {new_token(app, 'bob')}"}


def call(client, auth, tool, **body):
    return client.post(f"/tools/{tool}", json=body, headers=auth)


def close_basics(client, auth) -> None:
    assert call(client, auth, "start_task", task_id="basics").status_code == 200
    assert call(client, auth, "submit", task_id="basics", answer="yes").get_json()["new_status"] == "closed"


def test_reopen_records_the_move_and_its_reason_in_the_history(client, auth, course):
    close_basics(client, auth)
    reopened = call(client, auth, "go_back", task_id="course/basics", reason="I want to practise it again")
    assert reopened.status_code == 200
    assert (reopened.get_json()["old_status"], reopened.get_json()["new_status"]) == ("closed", "in_progress")
    shown = call(client, auth, "show_task", task_id="basics").get_json()
    assert shown["status"] == "in_progress"
    moves = [(e["action"], e["from_status"], e["to_status"], e["reason"]) for e in shown["history"]]
    assert moves == [
        ("start", "open", "in_progress", None),
        ("submit", "in_progress", "closed", "attempt 1: passed"),
        ("go_back", "closed", "in_progress", "I want to practise it again"),
    ]


def test_reopen_touches_only_the_callers_progress(client, auth, bob, course):
    close_basics(client, auth)
    refused = call(client, bob, "go_back", task_id="basics", reason="not mine to reopen")
    assert refused.status_code == 409 and refused.get_json()["error_code"] == "INVALID_STATE"  # bob's basics is open
    assert call(client, auth, "show_task", task_id="basics").get_json()["status"] == "closed"
    assert [e["action"] for e in call(client, bob, "show_task", task_id="basics").get_json()["history"]] == []


def test_reopening_a_missing_task_is_404_and_an_open_one_409(client, auth, course):
    missing = call(client, auth, "go_back", task_id="course/no_such_task", reason="why not")
    assert missing.status_code == 404 and missing.get_json()["error_code"] == "NOT_FOUND"
    not_closed = call(client, auth, "go_back", task_id="basics", reason="too early")
    assert not_closed.status_code == 409 and not_closed.get_json()["error_code"] == "INVALID_STATE"
    assert call(client, auth, "show_task", task_id="basics").get_json()["history"] == []
