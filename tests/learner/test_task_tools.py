"""The nine task tools through the real runner: success and error paths, the state machine,
blocking, `get_ready` ordering, learner isolation, attempts, the go_back audit trail."""

from __future__ import annotations

import pytest

from learner.progress import Moved, Refused, move
from storage.db import transaction
from storage.learner_tasks import find_tasks, list_events
from tests.task_support import SQL_ANSWER, Classroom


@pytest.fixture
def room(tmp_path):
    return Classroom(tmp_path)


def ids(output):
    return [task["id"] for task in output["tasks"]]


# get_ready ---------------------------------------------------------------------------------


def test_get_ready_orders_in_progress_then_priority_then_age_and_hides_blocked(room):
    # sql_query (P0) is blocked by basics; program is blocked by warmup
    assert ids(room.ok("get_ready", limit=20)) == ["basics", "essay_intro", "essay", "warmup"]
    room.ok("start_task", task_id="warmup")
    out = room.ok("get_ready", limit=20)
    assert ids(out) == ["warmup", "basics", "essay_intro", "essay"]
    assert out["total_ready"] == 4 and "1 in progress" in out["message"]
    assert out["tasks"][0] == {
        "id": "warmup",
        "project_id": "course",
        "title": "Warm-up",
        "status": "in_progress",
        "task_type": "task",
        "priority": 3,
        "blocked": False,
        "has_children": False,
    }


def test_get_ready_filters_and_limits(room):
    assert ids(room.ok("get_ready", task_type="subtask")) == ["essay_intro"]
    limited = room.ok("get_ready", limit=2)
    assert ids(limited) == ["basics", "essay_intro"] and limited["total_ready"] == 4
    assert ids(room.ok("get_ready", project_id="course", limit=1)) == ["basics"]
    essay = room.ok("get_ready", project_id="course")["tasks"][2]
    assert (essay["id"], essay["has_children"]) == ("essay", True)


@pytest.mark.parametrize(
    "data, code, hint",
    [
        ({"project_id": "nope"}, "NOT_FOUND", "known projects: course"),
        ({"limit": 0}, "VALIDATION_FAILED", "limit"),
        ({"task_type": "epic"}, "VALIDATION_FAILED", "task_type"),
        ({"colour": "red"}, "VALIDATION_FAILED", "colour"),
    ],
)
def test_get_ready_errors(room, data, code, hint):
    result = room.call("get_ready", **data)
    assert (result.ok, result.error_code) == (False, code)
    assert hint in result.message


def test_get_ready_with_no_projects(tmp_path):
    room = Classroom(tmp_path)
    room.conn.execute("DELETE FROM task_projects")
    out = room.ok("get_ready")
    assert out["tasks"] == [] and "import-tasks" in out["message"]


# blocking ----------------------------------------------------------------------------------


def test_dependency_blocks_until_closed_for_this_learner_then_unblocks(room):
    blocked = room.call("start_task", task_id="sql_query")
    assert blocked.error_code == "BLOCKED"
    assert "basics" in blocked.message and "/start_task basics" in blocked.message
    room.close_task("basics", "YES")
    assert "sql_query" in ids(room.ok("get_ready", limit=20))
    assert room.ok("start_task", task_id="sql_query")["new_status"] == "in_progress"
    # Bob has closed nothing: still blocked for him
    assert room.call("start_task", room.bob, task_id="sql_query").error_code == "BLOCKED"
    assert "sql_query" not in ids(room.ok("get_ready", room.bob, limit=20))


def test_go_back_on_a_dependency_blocks_dependents_again(room):
    room.close_task("basics", "yes")
    room.ok("start_task", task_id="sql_query")
    room.ok("go_back", task_id="basics", reason="I guessed the answer")
    assert room.call("submit", task_id="sql_query", answer=SQL_ANSWER).error_code == "BLOCKED"
    assert room.ok("show_task", task_id="sql_query")["blocked_by"] == ["basics"]


# show_task / get_context -------------------------------------------------------------------


def test_show_task_details_without_hidden_expectations(room):
    out = room.ok("show_task", task_id="sql_query")
    assert out["status"] == "open" and out["blocked_by"] == ["basics"]
    assert [d["id"] for d in out["dependencies"]] == ["basics"]
    (criterion,) = out["acceptance_criteria"]
    assert criterion["type"] == "sql_result" and criterion["tables"] == ["CREATE TABLE pets (name TEXT, kind TEXT)"]
    assert "Rex" not in str(out)  # neither the data nor the expected rows are shown
    essay = room.ok("show_task", task_id="course/essay")
    assert [c["id"] for c in essay["children"]] == ["essay_intro"] and essay["acceptance_criteria"][0]["rubric"]
    assert [b["id"] for b in room.ok("show_task", task_id="basics")["blocks"]] == ["sql_query"]
    program = room.ok("show_task", task_id="program")["acceptance_criteria"][0]
    assert (program["language"], program["tests"]) == ("python", 2)


def test_get_context_hierarchy_progress_and_next_step(room):
    room.close_task("basics", "yes")
    out = room.ok("get_context", task_id="essay_intro")
    assert [t["id"] for t in out["hierarchy"]] == ["essay"]
    assert out["progress"] == {"closed": 1, "total": 6, "percentage": 16.7}
    assert out["learner_id"] == room.alice and out["project_title"] == "Test course"
    assert out["next_step"] == "Start it with /start_task essay_intro"
    assert "Test course > Essay > Essay intro" in room.call("get_context", task_id="essay_intro").text


@pytest.mark.parametrize("tool", ["show_task", "get_context", "start_task", "get_comments"])
@pytest.mark.parametrize(
    "task_id, code, hint",
    [
        ("missing", "NOT_FOUND", "/get_ready"),
        ("other/basics", "NOT_FOUND", "in project 'other'"),
        ("bad id!", "VALIDATION_FAILED", "task_id"),
        ("", "VALIDATION_FAILED", "task_id"),
    ],
)
def test_task_reference_errors(room, tool, task_id, code, hint):
    result = room.call(tool, task_id=task_id)
    assert (result.error_code, hint in result.message) == (code, True), result.message


def test_an_id_shared_by_two_projects_must_be_qualified(room):
    from learner.importer import import_project
    from learner.spec import ProjectFile
    from tests.task_support import project

    other = project()
    other["project"]["id"] = "other"
    import_project(room.conn, ProjectFile.model_validate(other))
    result = room.call("show_task", task_id="basics")
    assert result.error_code == "VALIDATION_FAILED" and "course/basics, other/basics" in result.message
    assert room.ok("show_task", task_id="other/basics")["project_id"] == "other"


# start_task --------------------------------------------------------------------------------


def test_start_task_is_lazy_and_idempotent(room):
    assert room.conn.execute("SELECT COUNT(*) FROM task_progress").fetchone()[0] == 0
    first = room.ok("start_task", task_id="basics")
    assert (first["old_status"], first["new_status"]) == ("open", "in_progress")
    assert first["context"]["current_task"]["status"] == "in_progress"
    again = room.ok("start_task", task_id="basics")
    assert (again["old_status"], again["new_status"]) == ("in_progress", "in_progress")
    assert "already" in again["message"]
    assert room.conn.execute("SELECT COUNT(*) FROM task_progress").fetchone()[0] == 1


def test_start_task_refuses_closed_and_submitted(room):
    room.close_task("basics", "yes")
    closed = room.call("start_task", task_id="basics")
    assert closed.error_code == "INVALID_STATE" and "/go_back basics" in closed.message
    room.ok("start_task", task_id="essay")
    assert room.ok("submit", task_id="essay", answer="my essay")["new_status"] == "submitted"
    waiting = room.call("start_task", task_id="essay")
    assert waiting.error_code == "INVALID_STATE" and "review" in waiting.message


# submit ------------------------------------------------------------------------------------


def test_submit_numbers_every_attempt_and_closes_only_on_a_pass(room):
    room.ok("start_task", task_id="basics")
    first = room.ok("submit", task_id="basics", answer="no")
    assert (first["attempt"], first["result"], first["new_status"]) == (1, "failed", "in_progress")
    assert first["checks"][0]["passed"] is False and "the answer is yes" in first["checks"][0]["message"]
    second = room.ok("submit", task_id="basics", answer="maybe yes")
    assert (second["attempt"], second["result"]) == (2, "failed")
    third = room.ok("submit", task_id="basics", answer="Yes")
    assert (third["attempt"], third["result"], third["new_status"]) == (3, "passed", "closed")
    rows = room.conn.execute("SELECT attempt, result FROM task_attempts ORDER BY id").fetchall()
    assert [tuple(row) for row in rows] == [(1, "failed"), (2, "failed"), (3, "passed")]
    shown = room.ok("show_task", task_id="basics")
    assert (shown["submission_count"], shown["latest_result"], shown["status"]) == (3, "passed", "closed")


@pytest.mark.parametrize(
    "setup, code, hint",
    [
        ([], "INVALID_STATE", "/start_task basics"),
        ([("close", "basics")], "INVALID_STATE", "/go_back basics"),
    ],
)
def test_submit_state_errors(room, setup, code, hint):
    for _, task_id in setup:
        room.close_task(task_id, "yes")
    result = room.call("submit", task_id="basics", answer="yes")
    assert result.error_code == code and hint in result.message


def test_submit_validation_errors(room):
    assert room.call("submit", task_id="basics").error_code == "VALIDATION_FAILED"
    assert room.call("submit", task_id="basics", answer="   ").error_code == "VALIDATION_FAILED"
    missing = room.call("submit", task_id="nope", answer="x")
    assert missing.error_code == "NOT_FOUND"


def test_manual_review_queue_and_resubmission_supersedes(room):
    room.ok("start_task", task_id="essay")
    first = room.ok("submit", task_id="essay", answer="draft")
    assert (first["result"], first["new_status"], first["checks"][0]["passed"]) == ("pending_review", "submitted", None)
    second = room.ok("submit", task_id="essay", answer="final")
    assert (second["attempt"], second["new_status"]) == (2, "submitted")
    rows = room.conn.execute("SELECT attempt, result FROM task_attempts ORDER BY id").fetchall()
    assert [tuple(row) for row in rows] == [(1, "superseded"), (2, "pending_review")]
    assert "essay" not in ids(room.ok("get_ready", limit=20))


def test_code_test_without_a_judge_is_a_clear_error_and_counts_no_attempt(room):
    room.close_task("warmup", "warm up")
    room.ok("start_task", task_id="program")
    result = room.call("submit", task_id="program", answer="print(6)")
    assert result.error_code == "INTERNAL_ERROR"
    assert "not available" in result.message and "no attempt was counted" in result.message
    assert room.ok("show_task", task_id="program")["submission_count"] == 0


# comments ----------------------------------------------------------------------------------


def test_comments_are_private_per_learner_plus_shared(room):
    room.ok("add_comment", task_id="basics", text="alice's note")
    room.ok("add_comment", room.bob, task_id="basics", text="bob's note")
    shared = room.ok("add_comment", room.tess, task_id="basics", text="hint for all", shared=True)
    assert shared["shared"] is True and shared["author"] == "tess"
    alice = room.ok("get_comments", task_id="basics")
    bob = room.ok("get_comments", room.bob, task_id="basics")
    assert [c["text"] for c in alice["comments"]] == ["alice's note", "hint for all"]
    assert [c["text"] for c in bob["comments"]] == ["bob's note", "hint for all"]
    assert alice["total"] == 2 and [c["shared"] for c in alice["comments"]] == [False, True]


def test_get_comments_limit_keeps_the_newest(room):
    for number in range(5):
        room.ok("add_comment", task_id="basics", text=f"note {number}")
    out = room.ok("get_comments", task_id="basics", limit=2)
    assert [c["text"] for c in out["comments"]] == ["note 3", "note 4"] and out["total"] == 5
    assert "No comments" in room.call("get_comments", task_id="essay").text


@pytest.mark.parametrize(
    "data, code",
    [
        ({"task_id": "basics", "text": "for everyone", "shared": True}, "PERMISSION_DENIED"),
        ({"task_id": "basics"}, "VALIDATION_FAILED"),
        ({"task_id": "basics", "text": "x" * 4001}, "VALIDATION_FAILED"),
        ({"task_id": "ghost", "text": "hi"}, "NOT_FOUND"),
    ],
)
def test_add_comment_errors(room, data, code):
    result = room.call("add_comment", **data)
    assert result.error_code == code
    if code == "PERMISSION_DENIED":
        assert "leave `shared` out" in result.message


# the state machine itself ------------------------------------------------------------------


def test_move_follows_the_table_and_writes_only_changes(room):
    (essay,) = find_tasks(room.conn, "essay")

    def step(action, actor=None):
        with transaction(room.conn):
            return move(room.conn, learner_id=room.alice, task_pk=essay.pk, action=action, actor_id=actor)

    walk = [
        ("go_back", Refused(action="go_back", current="open")),
        ("review_pass", Refused(action="review_pass", current="open")),
        ("start", ("open", "in_progress", True)),
        ("start", ("in_progress", "in_progress", False)),  # a resume writes nothing
        ("submit_failed", ("in_progress", "in_progress", False)),
        ("submit_pending", ("in_progress", "submitted", True)),
        ("start", Refused(action="start", current="submitted")),
        ("review_reject", ("submitted", "in_progress", True)),
        ("submit_passed", ("in_progress", "closed", True)),
        ("submit_failed", Refused(action="submit_failed", current="closed")),
        ("go_back", ("closed", "in_progress", True)),
    ]
    for action, expected in walk:
        moved = step(action)
        if isinstance(expected, Refused):
            assert moved == expected, action
        else:
            assert isinstance(moved, Moved), action
            assert (moved.old, moved.new, moved.audit_id is not None) == expected, action
    events = [(e.action, e.from_status, e.to_status) for e in list_events(room.conn, room.alice, essay.pk)]
    assert events == [
        ("start", "open", "in_progress"),
        ("submit", "in_progress", "submitted"),
        ("review", "submitted", "in_progress"),
        ("submit", "in_progress", "closed"),
        ("go_back", "closed", "in_progress"),
    ]


# go_back -----------------------------------------------------------------------------------


def test_go_back_reopens_with_reason_in_the_audit_trail(room):
    room.close_task("basics", "yes")
    out = room.ok("go_back", task_id="basics", reason="I want to practise again")
    assert (out["old_status"], out["new_status"], out["reason"]) == (
        "closed",
        "in_progress",
        "I want to practise again",
    )
    task_pk = room.conn.execute("SELECT pk FROM tasks WHERE id = 'basics'").fetchone()[0]
    events = list_events(room.conn, room.alice, task_pk)
    assert [(e.action, e.from_status, e.to_status) for e in events] == [
        ("start", "open", "in_progress"),
        ("submit", "in_progress", "closed"),
        ("go_back", "closed", "in_progress"),
    ]
    assert events[-1].reason == "I want to practise again" and events[-1].id == out["audit_id"]
    assert room.ok("show_task", task_id="basics")["history"][-1]["reason"] == "I want to practise again"
    assert room.ok("submit", task_id="basics", answer="yes")["attempt"] == 2  # numbering continues


@pytest.mark.parametrize(
    "data, code, hint",
    [
        ({"task_id": "basics", "reason": "redo"}, "INVALID_STATE", "not closed"),
        ({"task_id": "basics"}, "VALIDATION_FAILED", "reason"),
        ({"task_id": "basics", "reason": "x"}, "VALIDATION_FAILED", "reason"),
        ({"task_id": "nope", "reason": "redo it"}, "NOT_FOUND", "/get_ready"),
    ],
)
def test_go_back_errors(room, data, code, hint):
    result = room.call("go_back", **data)
    assert result.error_code == code and hint in result.message


# request_help ------------------------------------------------------------------------------


def test_request_help_creates_one_open_request_per_task(room):
    out = room.ok("request_help", task_id="sql_query", message="what is a JOIN?")  # blocked tasks too
    assert out["status"] == "open" and out["request_id"] > 0
    again = room.call("request_help", task_id="sql_query", message="still stuck")
    assert again.error_code == "INVALID_STATE" and f"#{out['request_id']}" in again.message
    assert room.ok("request_help", room.bob, task_id="sql_query", message="me too")["request_id"] != out["request_id"]


@pytest.mark.parametrize(
    "data, code",
    [
        ({"task_id": "basics"}, "VALIDATION_FAILED"),
        ({"task_id": "basics", "message": "?"}, "VALIDATION_FAILED"),
        ({"task_id": "nope", "message": "help me"}, "NOT_FOUND"),
    ],
)
def test_request_help_errors(room, data, code):
    assert room.call("request_help", **data).error_code == code


# isolation ---------------------------------------------------------------------------------


def test_two_learners_see_only_their_own_status_and_attempts(room):
    room.close_task("basics", "yes")
    room.ok("start_task", room.bob, task_id="warmup")
    room.ok("submit", room.bob, task_id="warmup", answer="cold")
    assert room.ok("show_task", task_id="basics")["status"] == "closed"
    bob_view = room.ok("show_task", room.bob, task_id="basics")
    assert (bob_view["status"], bob_view["submission_count"], bob_view["history"]) == ("open", 0, [])
    alice_warmup = room.ok("show_task", task_id="warmup")
    assert (alice_warmup["status"], alice_warmup["submission_count"]) == ("open", 0)
    assert ids(room.ok("get_ready", room.bob, limit=1)) == ["warmup"]
    assert room.ok("get_context", room.bob, task_id="basics")["progress"]["closed"] == 0


# the chat argument rule --------------------------------------------------------------------


@pytest.mark.parametrize(
    "tool, field, raw, expected",
    [
        ("go_back", "reason", {"task_id": "basics I want to redo it"}, ("basics", "I want to redo it")),
        ("go_back", "reason", {"task_id": "basics first line", "reason": "more"}, ("basics", "first line\nmore")),
        ("add_comment", "text", {"task_id": "basics", "text": "body only"}, ("basics", "body only")),
        ("submit", "answer", {"task_id": "basics  yes"}, ("basics", "yes")),
    ],
)
def test_first_word_is_the_task_id_and_the_rest_is_the_text(tool, field, raw, expected):
    from tests.task_support import TOOLS

    data = TOOLS[tool].input_model.model_validate(raw)
    assert (data.task_id, getattr(data, field)) == expected
