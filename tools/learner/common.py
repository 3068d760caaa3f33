"""What the nine task tools share: task references, the chat argument rule, views of tasks.

Task references: a task id (`loops`), or `project/id` when two projects use the same id.

Chat argument rule (one for every tool that takes a task and a text): the first word after
the command is the task id; the rest of the first line and the lines after it (the body)
together form the text (`answer`, `text`, `reason` or `message`), joined by a newline.
`/go_back loops I want to redo it` and `/submit loops` followed by the code on the next lines
are both valid. Over `POST /tools/<name>` the fields are simply given by name.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any, ClassVar

from pydantic import BaseModel, Field, model_validator

from learner.checks import parse_criteria
from learner.progress import LearnerProject
from learner.spec import CodeTestCriterion, ManualCriterion, SqlResultCriterion, TextMatchCriterion
from storage.learner_tasks import TaskRow, find_tasks, get_project, list_attempts, list_events, visible_comments
from tools.base import ErrorCode, ToolContext, ToolFailure, ToolInput

RESULT_ROLE = "task_tools"
TASK_REF_PATTERN = r"^(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,63}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
PROJECT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_FIRST_WORD = re.compile(r"\s+")


class TaskRefInput(ToolInput):
    task_id: str = Field(
        max_length=129,
        pattern=TASK_REF_PATTERN,
        description="The task's id (from get_ready), or project/id when two projects share the id.",
    )


class TaskTextInput(TaskRefInput):
    """A task id and one text field; in chat the text is what follows the id (see module doc)."""

    text_field: ClassVar[str] = "text"

    @model_validator(mode="before")
    @classmethod
    def split_command_arguments(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("task_id"), str):
            return data
        parts = _FIRST_WORD.split(data["task_id"].strip(), maxsplit=1)
        if len(parts) < 2:
            return data
        body = data.get(cls.text_field)
        text = parts[1] if not isinstance(body, str) or not body.strip() else f"{parts[1]}\n{body}"
        return {**data, "task_id": parts[0], cls.text_field: text}


# views ------------------------------------------------------------------------------------


class TaskSummary(BaseModel):
    id: str
    project_id: str
    title: str
    status: str
    task_type: str
    priority: int
    blocked: bool
    has_children: bool


class CriterionView(BaseModel):
    """What a learner may know about a criterion: never expected outputs or hidden cases."""

    id: str
    type: str
    description: str
    language: str | None = None
    tests: int | None = None
    tables: list[str] | None = None  # CREATE statements of the database a sql_result query runs on
    rubric: str | None = None


class Objective(BaseModel):
    level: str
    description: str


class AttemptView(BaseModel):
    attempt: int
    result: str
    created_at: str
    checks: list[dict[str, Any]]
    review_note: str | None = None


class EventView(BaseModel):
    action: str
    from_status: str
    to_status: str
    reason: str | None
    created_at: str


def resolve(ctx: ToolContext, task_ref: str) -> tuple[LearnerProject, TaskRow]:
    """The learner's project state and the task a reference names, or NOT_FOUND / VALIDATION_FAILED."""
    project_id, _, task_id = task_ref.rpartition("/")
    found = find_tasks(ctx.conn, task_id, project_id or None)
    if not found:
        where = f" in project {project_id!r}" if project_id else ""
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"no task {task_id!r}{where}; call /get_ready to list the tasks you can work on (ids are case-sensitive).",
        )
    if len(found) > 1:
        refs = ", ".join(task.ref for task in found)
        raise ToolFailure(
            ErrorCode.VALIDATION_FAILED,
            f"task id {task_id!r} exists in several projects ({refs}); write it as project/id, e.g. {found[0].ref}.",
        )
    state = LearnerProject.load(ctx.conn, ctx.user_id, found[0].project_id)
    task = state.task(found[0].id)
    assert task is not None
    return state, task


def summary(state: LearnerProject, task: TaskRow) -> TaskSummary:
    return TaskSummary(
        id=task.id,
        project_id=task.project_id,
        title=task.title,
        status=state.status[task.id],
        task_type=task.task_type,
        priority=task.priority,
        blocked=bool(state.blocked_by(task)),
        has_children=bool(state.children(task)),
    )


def criteria_views(task: TaskRow) -> list[CriterionView]:
    views = []
    for criterion in parse_criteria(task.acceptance_criteria):
        view = CriterionView(id=criterion.id, type=criterion.type, description=criterion.description)
        if isinstance(criterion, CodeTestCriterion):
            view = view.model_copy(update={"language": criterion.language, "tests": len(criterion.cases)})
        elif isinstance(criterion, SqlResultCriterion):
            view = view.model_copy(update={"language": "sql", "tables": _tables(criterion.setup_sql)})
        elif isinstance(criterion, ManualCriterion) and criterion.rubric:
            view = view.model_copy(update={"rubric": criterion.rubric})
        elif isinstance(criterion, TextMatchCriterion):
            view = view.model_copy(update={"language": "text"})
        views.append(view)
    return views


def _tables(setup_sql: str) -> list[str]:
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(setup_sql)
        return [row[0] for row in db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
    finally:
        db.close()


def objectives(task: TaskRow) -> list[Objective]:
    return [Objective(**item) for item in task.learning_objectives]


def attempts(ctx: ToolContext, task: TaskRow, last: int | None = None) -> list[AttemptView]:
    rows = list_attempts(ctx.conn, ctx.user_id, task.pk)
    shown = rows if last is None else rows[-last:]
    return [
        AttemptView(
            attempt=row.attempt,
            result=row.result,
            created_at=row.created_at,
            checks=row.checks,
            review_note=row.review_note,
        )
        for row in shown
    ]


def history(ctx: ToolContext, task: TaskRow) -> list[EventView]:
    return [EventView(**event.model_dump(exclude={"id"})) for event in list_events(ctx.conn, ctx.user_id, task.pk)]


def comment_count(ctx: ToolContext, task: TaskRow) -> int:
    return visible_comments(ctx.conn, task.pk, ctx.user_id, 1)[1]


def project_title(ctx: ToolContext, project_id: str) -> str:
    project = get_project(ctx.conn, project_id)
    return project.title if project else project_id


def next_step(state: LearnerProject, task: TaskRow) -> str:
    """A one-line hint saying which call moves this task forward."""
    status, blockers = state.status[task.id], state.blocked_by(task)
    if status == "closed":
        return f"Done. To redo it: /go_back {task.id} <reason>. Next tasks: /get_ready"
    if blockers:
        return f"Blocked until you close: {', '.join(b.id for b in blockers)}. Start with /start_task {blockers[0].id}"
    if status == "open":
        return f"Start it with /start_task {task.id}"
    if status == "submitted":
        return "Your answer waits for an instructor's review; you may /submit again to replace it."
    return f"Submit your answer with /submit {task.id} and the answer on the next lines"


def block_message(task: TaskRow, blockers: list[TaskRow]) -> str:
    names = ", ".join(f"{b.id} ({b.title})" for b in blockers)
    return (
        f"task {task.id!r} is blocked until you close its dependencies: {names}. "
        f"Work on those first (/start_task {blockers[0].id}) or call /get_ready for tasks you can start now."
    )


def render_summary(task: TaskSummary) -> str:
    flags = " [blocked]" if task.blocked else ""
    return f"{task.id} (P{task.priority}, {task.status}{flags}): {task.title}"
