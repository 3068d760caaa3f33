"""The task tools over HTTP (`GET /tools`, `POST /tools/<name>` with SPEC 10's error shape),
the instructor surface (`/help-requests`, `/task-reviews`), and task commands in chat."""

from __future__ import annotations

from typing import Any

import pytest

from api.services import services_of
from learner.importer import import_project
from learner.spec import ProjectFile
from storage.users import create_user
from tests.conftest import new_token
from tests.task_support import PROJECT
from tools.learner import TASK_TOOLS


@pytest.fixture
def base_settings(base_settings: dict[str, Any], backend_settings: dict[str, str]) -> dict[str, Any]:
    """Every test here runs on both backends: SQLite and PostgreSQL (tests/pg_support.py)."""
    return {**base_settings, **backend_settings}


@pytest.fixture
def course(app):
    with services_of(app).database.connection() as conn:
        import_project(conn, ProjectFile.model_validate(PROJECT))
        _, teacher = create_user(conn, "tess", role="instructor")
    return {"Authorization": f"Bearer {teacher}"}


@pytest.fixture
def bob(app):
    return {"Authorization": f"Bearer {new_token(app, 'bob')}"}


def post(client, auth, tool, **body):
    return client.post(f"/tools/{tool}", json=body, headers=auth)


def test_get_tools_lists_the_nine_with_derived_schemas(client, auth):
    schemas = {s["function"]["name"]: s["function"] for s in client.get("/tools", headers=auth).get_json()["tools"]}
    for tool in TASK_TOOLS:
        assert schemas[tool.name]["parameters"] == tool.input_model.model_json_schema()
        assert tool.result_role == "task_tools" and tool.error_style == "task"
    assert schemas["submit"]["parameters"]["required"] == ["task_id", "answer"]
    assert schemas["go_back"]["parameters"]["required"] == ["task_id", "reason"]


def test_a_learner_works_through_tasks_over_http(client, auth, course):
    assert [t["id"] for t in post(client, auth, "get_ready").get_json()["tasks"]][0] == "basics"
    started = post(client, auth, "start_task", task_id="basics")
    assert started.status_code == 200 and started.get_json()["new_status"] == "in_progress"
    passed = post(client, auth, "submit", task_id="basics", answer="yes").get_json()
    assert (passed["attempt"], passed["new_status"]) == (1, "closed")
    assert post(client, auth, "add_comment", task_id="basics", text="easy").status_code == 200
    assert post(client, auth, "get_comments", task_id="basics").get_json()["total"] == 1
    assert (
        post(client, auth, "go_back", task_id="basics", reason="again please").get_json()["new_status"] == "in_progress"
    )
    assert post(client, auth, "show_task", task_id="basics").get_json()["status"] == "in_progress"
    assert post(client, auth, "get_context", task_id="basics").get_json()["progress"]["closed"] == 0
    assert post(client, auth, "request_help", task_id="basics", message="stuck").get_json()["status"] == "open"


@pytest.mark.parametrize(
    "tool, body, status, code",
    [
        ("show_task", {"task_id": "nope"}, 404, "NOT_FOUND"),
        ("start_task", {"task_id": "sql_query"}, 409, "BLOCKED"),
        ("submit", {"task_id": "basics", "answer": "yes"}, 409, "INVALID_STATE"),
        ("go_back", {"task_id": "basics", "reason": "redo it"}, 409, "INVALID_STATE"),
        ("go_back", {"task_id": "basics"}, 400, "VALIDATION_FAILED"),
        ("get_ready", {"limit": 99}, 400, "VALIDATION_FAILED"),
        ("add_comment", {"task_id": "basics", "text": "all", "shared": True}, 403, "PERMISSION_DENIED"),
    ],
)
def test_errors_have_the_task_shape_and_status(client, auth, course, tool, body, status, code):
    response = post(client, auth, tool, **body)
    assert response.status_code == status
    payload = response.get_json()
    assert set(payload) == {"success", "error_code", "message"}
    assert (payload["success"], payload["error_code"]) == (False, code)
    assert payload["message"]


def test_code_test_without_the_judge_is_an_internal_error_over_http(client, auth, course):
    post(client, auth, "start_task", task_id="warmup")
    post(client, auth, "submit", task_id="warmup", answer="warm")
    post(client, auth, "start_task", task_id="program")
    response = post(client, auth, "submit", task_id="program", answer="print(6)")
    assert response.status_code == 500 and response.get_json()["error_code"] == "INTERNAL_ERROR"
    assert "no attempt was counted" in response.get_json()["message"]


def test_learners_are_isolated_over_http(client, auth, bob, course):
    post(client, auth, "start_task", task_id="basics")
    post(client, auth, "submit", task_id="basics", answer="yes")
    post(client, auth, "add_comment", task_id="basics", text="alice only")
    assert post(client, bob, "show_task", task_id="basics").get_json()["status"] == "open"
    assert post(client, bob, "get_comments", task_id="basics").get_json()["comments"] == []
    assert post(client, bob, "start_task", task_id="sql_query").get_json()["error_code"] == "BLOCKED"
    assert post(client, auth, "start_task", task_id="sql_query").status_code == 200


# the instructor surface --------------------------------------------------------------------


def test_help_requests_are_listed_for_instructors_only(client, auth, bob, course):
    assert client.get("/help-requests").status_code == 401
    assert client.get("/help-requests", headers=auth).status_code == 403
    assert client.get("/help-requests", headers=auth).get_json()["error"]["code"] == "forbidden"
    request_id = post(client, bob, "request_help", task_id="essay", message="how long should it be?").get_json()[
        "request_id"
    ]
    listed = client.get("/help-requests", headers=course).get_json()["help_requests"]
    assert [(r["id"], r["learner"], r["task_id"], r["message"], r["status"]) for r in listed] == [
        (request_id, "bob", "essay", "how long should it be?", "open")
    ]
    assert client.post(f"/help-requests/{request_id}/resolve", headers=course).get_json()["status"] == "resolved"
    assert client.get("/help-requests?status=open", headers=course).get_json()["help_requests"] == []
    assert client.post(f"/help-requests/{request_id}/resolve", headers=course).status_code == 404
    assert client.get("/help-requests?status=bogus", headers=course).status_code == 400


@pytest.mark.parametrize("passed, status, result", [(True, "closed", "passed"), (False, "in_progress", "rejected")])
def test_manual_review_closes_or_reopens(client, auth, bob, course, passed, status, result):
    post(client, auth, "start_task", task_id="essay")
    attempt = post(client, auth, "submit", task_id="essay", answer="My essay.").get_json()
    assert attempt["new_status"] == "submitted"
    assert client.get("/task-reviews", headers=auth).status_code == 403
    (pending,) = client.get("/task-reviews", headers=course).get_json()["reviews"]
    assert (pending["id"], pending["learner"], pending["answer"]) == (attempt["submission_id"], "alice", "My essay.")
    answer = client.post(
        f"/task-reviews/{pending['id']}", json={"passed": passed, "note": "see my note"}, headers=course
    )
    assert answer.get_json() == {"id": pending["id"], "result": result, "status": status}
    shown = post(client, auth, "show_task", task_id="essay").get_json()
    assert (shown["status"], shown["latest_result"]) == (status, result)
    assert [c["text"] for c in post(client, auth, "get_comments", task_id="essay").get_json()["comments"]] == [
        "see my note"
    ]
    assert post(client, bob, "get_comments", task_id="essay").get_json()["comments"] == []
    assert client.post(f"/task-reviews/{pending['id']}", json={"passed": True}, headers=course).status_code == 404


def test_a_review_of_a_task_no_longer_submitted_is_refused_and_writes_nothing(app, client, auth, course):
    post(client, auth, "start_task", task_id="essay")
    attempt = post(client, auth, "submit", task_id="essay", answer="My essay.").get_json()
    with services_of(app).database.connection() as conn:  # moved behind the review's back
        conn.execute("UPDATE task_progress SET status = 'in_progress'")
        conn.commit()
    answer = client.post(
        f"/task-reviews/{attempt['submission_id']}", json={"passed": True, "note": "ok"}, headers=course
    )
    assert (answer.status_code, answer.get_json()["error"]["code"]) == (409, "invalid_state")
    assert "in_progress, not submitted" in answer.get_json()["error"]["message"]
    (pending,) = client.get("/task-reviews", headers=course).get_json()["reviews"]
    assert pending["id"] == attempt["submission_id"]  # still waiting: the verdict was not recorded
    assert post(client, auth, "get_comments", task_id="essay").get_json()["comments"] == []


# chat commands through the pipeline --------------------------------------------------------


def chat(client, auth, message, session_id=None):
    body = {"message": message, **({"session_id": session_id} if session_id else {})}
    return client.post("/chat", json=body, headers=auth).get_json()


def test_task_commands_in_chat(client, auth, course, fake_llm):
    fake_llm.queue("/get_ready", "Start with basics.")
    first = chat(client, auth, "what should I do?")
    assert [m["role"] for m in first["messages"]] == ["user", "task_tools", "assistant"]
    assert first["tool"] == {"name": "get_ready", "ok": True}
    assert first["messages"][1]["meta"]["output"]["tasks"][0]["id"] == "basics"
    assert "Tool result for /get_ready" in fake_llm.requests[1]["messages"][-1]["content"]
    session = first["session_id"]

    fake_llm.queue("/start_task basics", "Go!")
    assert chat(client, auth, "start basics", session)["messages"][1]["meta"]["output"]["new_status"] == "in_progress"

    fake_llm.queue("/submit basics\n```\nyes\n```", "Well done.")
    submitted = chat(client, auth, "my answer is yes", session)["messages"][1]["meta"]["output"]
    assert (submitted["attempt"], submitted["new_status"]) == (1, "closed")

    fake_llm.queue("/go_back basics I want to redo it", "Reopened.")
    reopened = chat(client, auth, "let me redo basics", session)["messages"][1]["meta"]["output"]
    assert (reopened["reason"], reopened["new_status"]) == ("I want to redo it", "in_progress")


def test_a_task_error_in_chat_is_a_stored_result_the_model_sees(client, auth, course, fake_llm):
    fake_llm.queue("/start_task sql_query", "You need to finish basics first.")
    body = chat(client, auth, "start the sql task")
    tool_message = body["messages"][1]
    assert tool_message["role"] == "task_tools"
    assert (tool_message["meta"]["ok"], tool_message["meta"]["code"]) == (False, "BLOCKED")
    assert "> Error: BLOCKED: task 'sql_query' is blocked" in tool_message["content"]
    assert body["reply"] == "You need to finish basics first."


def test_chat_usage_error_lists_the_usage(client, auth, course, fake_llm):
    fake_llm.queue("/go_back basics", "I need a reason.")
    stored = chat(client, auth, "reopen basics")["messages"][1]
    assert stored["meta"]["code"] == "VALIDATION_FAILED" and "reason: Field required" in stored["meta"]["message"]
    assert "Usage: /go_back &lt;task_id&gt; &lt;reason&gt;" in stored["content"]  # the model's hint, in the contract
