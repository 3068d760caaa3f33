"""Task projects, tasks, and every per-learner record about them (SQL only, no rules).

Task templates (`tasks`) are shared; everything else is keyed by (learner, task). A learner
with no `task_progress` row for a task is `open` on it: rows are created lazily by the first
status change. Every status change also writes a `task_events` row (the audit trail; a
`go_back` keeps its reason there). The rules about which change is allowed live in
`learner/progress.py`; callers hold the transaction.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from storage.connection import DbConnection, DbRow, inserted_id
from storage.db import utc_now

OPEN = "open"


class TaskRow(BaseModel):
    pk: int
    project_id: str
    id: str
    title: str
    description: str
    task_type: str
    parent_id: str | None
    dependencies: list[str]
    priority: int
    learning_objectives: list[dict[str, Any]]
    acceptance_criteria: list[dict[str, Any]]
    position: int
    content_hash: str
    retired: bool
    created_at: str
    updated_at: str

    @property
    def ref(self) -> str:
        """The unambiguous reference `project/task`."""
        return f"{self.project_id}/{self.id}"


class ProjectRow(BaseModel):
    id: str
    title: str
    description: str
    source_hash: str
    created_at: str
    updated_at: str


class AttemptRow(BaseModel):
    id: int
    learner_id: int
    task_pk: int
    attempt: int
    answer: str
    result: str
    checks: list[dict[str, Any]]
    reviewed_by: int | None
    review_note: str | None
    reviewed_at: str | None
    created_at: str


class CommentRow(BaseModel):
    id: int
    task_pk: int
    learner_id: int | None
    author: str
    text: str
    created_at: str


class EventRow(BaseModel):
    id: int
    action: str
    from_status: str
    to_status: str
    reason: str | None
    created_at: str


class HelpRequestRow(BaseModel):
    id: int
    learner_id: int
    learner: str
    project_id: str
    task_id: str
    task_title: str
    message: str
    status: str
    created_at: str


_JSON_COLUMNS = ("dependencies", "learning_objectives", "acceptance_criteria")


def _task(row: DbRow) -> TaskRow:
    data = {key: row[key] for key in TaskRow.model_fields}
    for key in _JSON_COLUMNS:
        data[key] = json.loads(data[key])
    return TaskRow(**data)


# projects and templates -------------------------------------------------------------------


def get_project(conn: DbConnection, project_id: str) -> ProjectRow | None:
    row = conn.execute("SELECT * FROM task_projects WHERE id = ?", (project_id,)).fetchone()
    return ProjectRow(**{key: row[key] for key in ProjectRow.model_fields}) if row else None


def list_projects(conn: DbConnection) -> list[ProjectRow]:
    rows = conn.execute("SELECT * FROM task_projects ORDER BY id")
    return [ProjectRow(**{key: row[key] for key in ProjectRow.model_fields}) for row in rows]


def save_project(conn: DbConnection, project_id: str, title: str, description: str, source_hash: str) -> None:
    now = utc_now()
    conn.execute(
        "INSERT INTO task_projects(id, title, description, source_hash, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET title = excluded.title,"
        " description = excluded.description, source_hash = excluded.source_hash, updated_at = excluded.updated_at",
        (project_id, title, description, source_hash, now, now),
    )


def any_open_tasks(conn: DbConnection) -> bool:
    """Whether a course is loaded: at least one task not retired (the learner commands need one)."""
    return conn.execute("SELECT 1 FROM tasks WHERE retired = 0 LIMIT 1").fetchone() is not None


def project_tasks(conn: DbConnection, project_id: str, *, include_retired: bool = False) -> list[TaskRow]:
    retired = "" if include_retired else " AND retired = 0"
    rows = conn.execute(f"SELECT * FROM tasks WHERE project_id = ?{retired} ORDER BY position, pk", (project_id,))
    return [_task(row) for row in rows]


def save_task(conn: DbConnection, project_id: str, values: dict[str, Any]) -> None:
    """Insert or update one template by (project, id); `values` holds every template column."""
    now = utc_now()
    row = {**values, **{key: json.dumps(values[key]) for key in _JSON_COLUMNS}}
    conn.execute(
        "INSERT INTO tasks(project_id, id, title, description, task_type, parent_id, dependencies, priority,"
        " learning_objectives, acceptance_criteria, position, content_hash, retired, created_at, updated_at)"
        " VALUES (:project_id, :id, :title, :description, :task_type, :parent_id, :dependencies, :priority,"
        " :learning_objectives, :acceptance_criteria, :position, :content_hash, 0, :now, :now)"
        " ON CONFLICT(project_id, id) DO UPDATE SET title = excluded.title, description = excluded.description,"
        " task_type = excluded.task_type, parent_id = excluded.parent_id, dependencies = excluded.dependencies,"
        " priority = excluded.priority, learning_objectives = excluded.learning_objectives,"
        " acceptance_criteria = excluded.acceptance_criteria, position = excluded.position,"
        " content_hash = excluded.content_hash, retired = 0, updated_at = excluded.updated_at",
        {**row, "project_id": project_id, "now": now},
    )


def retire_tasks(conn: DbConnection, project_id: str, task_ids: list[str]) -> None:
    conn.executemany(
        "UPDATE tasks SET retired = 1, updated_at = ? WHERE project_id = ? AND id = ?",
        [(utc_now(), project_id, task_id) for task_id in task_ids],
    )


def find_tasks(conn: DbConnection, task_id: str, project_id: str | None = None) -> list[TaskRow]:
    """Live tasks with this id (one per project), optionally in one project."""
    if project_id is None:
        rows = conn.execute("SELECT * FROM tasks WHERE id = ? AND retired = 0 ORDER BY project_id", (task_id,))
    else:
        rows = conn.execute(
            "SELECT * FROM tasks WHERE id = ? AND project_id = ? AND retired = 0", (task_id, project_id)
        )
    return [_task(row) for row in rows]


# progress and the audit trail -------------------------------------------------------------


def statuses(conn: DbConnection, learner_id: int, task_pks: list[int]) -> dict[int, str]:
    """The learner's status on each task; tasks with no progress row are `open`."""
    found: dict[int, str] = {}
    for start in range(0, len(task_pks), 500):
        chunk = task_pks[start : start + 500]
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(
            f"SELECT task_pk, status FROM task_progress WHERE learner_id = ? AND task_pk IN ({marks})",
            (learner_id, *chunk),
        )
        found.update({row["task_pk"]: row["status"] for row in rows})
    return {pk: found.get(pk, OPEN) for pk in task_pks}


def set_status(
    conn: DbConnection,
    *,
    learner_id: int,
    task_pk: int,
    old: str,
    new: str,
    action: str,
    actor_id: int | None = None,
    reason: str | None = None,
) -> int:
    """Write the learner's new status (creating the row lazily) and its audit event; returns the event id."""
    now = utc_now()
    conn.execute(
        "INSERT INTO task_progress(learner_id, task_pk, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT(learner_id, task_pk) DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at",
        (learner_id, task_pk, new, now, now),
    )
    cursor = conn.execute(
        "INSERT INTO task_events(learner_id, task_pk, actor_id, action, from_status, to_status, reason, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (learner_id, task_pk, learner_id if actor_id is None else actor_id, action, old, new, reason, now),
    )
    return inserted_id(cursor)


def list_events(conn: DbConnection, learner_id: int, task_pk: int) -> list[EventRow]:
    rows = conn.execute(
        "SELECT * FROM task_events WHERE learner_id = ? AND task_pk = ? ORDER BY id", (learner_id, task_pk)
    )
    return [EventRow(**{key: row[key] for key in EventRow.model_fields}) for row in rows]


# attempts ---------------------------------------------------------------------------------


def _attempt(row: DbRow) -> AttemptRow:
    data = {key: row[key] for key in AttemptRow.model_fields}
    data["checks"] = json.loads(data["checks"])
    return AttemptRow(**data)


def add_attempt(
    conn: DbConnection, *, learner_id: int, task_pk: int, answer: str, result: str, checks: list[dict[str, Any]]
) -> AttemptRow:
    """Store the next numbered attempt (1, 2, …); call inside a write transaction."""
    number = int(
        conn.execute(
            "SELECT COALESCE(MAX(attempt), 0) + 1 FROM task_attempts WHERE learner_id = ? AND task_pk = ?",
            (learner_id, task_pk),
        ).fetchone()[0]
    )
    cursor = conn.execute(
        "INSERT INTO task_attempts(learner_id, task_pk, attempt, answer, result, checks, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (learner_id, task_pk, number, answer, result, json.dumps(checks), utc_now()),
    )
    stored = get_attempt(conn, inserted_id(cursor))
    assert stored is not None  # just inserted, in this transaction
    return stored


def get_attempt(conn: DbConnection, attempt_id: int) -> AttemptRow | None:
    row = conn.execute("SELECT * FROM task_attempts WHERE id = ?", (attempt_id,)).fetchone()
    return _attempt(row) if row else None


def list_attempts(conn: DbConnection, learner_id: int, task_pk: int) -> list[AttemptRow]:
    rows = conn.execute(
        "SELECT * FROM task_attempts WHERE learner_id = ? AND task_pk = ? ORDER BY attempt", (learner_id, task_pk)
    )
    return [_attempt(row) for row in rows]


def supersede_pending(conn: DbConnection, learner_id: int, task_pk: int) -> None:
    conn.execute(
        "UPDATE task_attempts SET result = 'superseded' WHERE learner_id = ? AND task_pk = ? AND result = 'pending_review'",
        (learner_id, task_pk),
    )


def pending_reviews(conn: DbConnection, limit: int = 100) -> list[AttemptRow]:
    rows = conn.execute("SELECT * FROM task_attempts WHERE result = 'pending_review' ORDER BY id LIMIT ?", (limit,))
    return [_attempt(row) for row in rows]


def record_review(conn: DbConnection, attempt_id: int, *, reviewer_id: int, passed: bool, note: str) -> None:
    conn.execute(
        "UPDATE task_attempts SET result = ?, reviewed_by = ?, review_note = ?, reviewed_at = ? WHERE id = ?",
        ("passed" if passed else "rejected", reviewer_id, note, utc_now(), attempt_id),
    )


def get_task_by_pk(conn: DbConnection, task_pk: int) -> TaskRow | None:
    row = conn.execute("SELECT * FROM tasks WHERE pk = ?", (task_pk,)).fetchone()
    return _task(row) if row else None


# comments ---------------------------------------------------------------------------------


def add_comment(conn: DbConnection, *, task_pk: int, author_id: int, learner_id: int | None, text: str) -> int:
    """`learner_id` None = a shared comment every learner sees; else private to that learner."""
    cursor = conn.execute(
        "INSERT INTO task_comments(task_pk, learner_id, author_id, text, created_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
        (task_pk, learner_id, author_id, text, utc_now()),
    )
    return inserted_id(cursor)


def visible_comments(conn: DbConnection, task_pk: int, learner_id: int, limit: int) -> tuple[list[CommentRow], int]:
    """The newest `limit` comments this learner may see (shared + own), oldest first, and the total."""
    where = "c.task_pk = ? AND (c.learner_id IS NULL OR c.learner_id = ?)"
    total = int(
        conn.execute(f"SELECT COUNT(*) FROM task_comments c WHERE {where}", (task_pk, learner_id)).fetchone()[0]
    )
    rows = conn.execute(
        f"SELECT c.id, c.task_pk, c.learner_id, COALESCE(u.name, 'deleted user') AS author, c.text, c.created_at"
        f" FROM task_comments c LEFT JOIN users u ON u.id = c.author_id WHERE {where} ORDER BY c.id DESC LIMIT ?",
        (task_pk, learner_id, limit),
    )
    comments = [CommentRow(**{key: row[key] for key in CommentRow.model_fields}) for row in rows]
    return comments[::-1], total


# help requests ----------------------------------------------------------------------------


def open_help_request(conn: DbConnection, learner_id: int, task_pk: int) -> int | None:
    row = conn.execute(
        "SELECT id FROM help_requests WHERE learner_id = ? AND task_pk = ? AND status = 'open'", (learner_id, task_pk)
    ).fetchone()
    return int(row["id"]) if row else None


def add_help_request(conn: DbConnection, *, learner_id: int, task_pk: int, message: str) -> int:
    cursor = conn.execute(
        "INSERT INTO help_requests(learner_id, task_pk, message, status, created_at) VALUES (?, ?, ?, 'open', ?) RETURNING id",
        (learner_id, task_pk, message, utc_now()),
    )
    return inserted_id(cursor)


def list_help_requests(conn: DbConnection, status: str | None = None, limit: int = 200) -> list[HelpRequestRow]:
    where, params = ("WHERE h.status = ?", [status]) if status else ("", [])
    rows = conn.execute(
        "SELECT h.id, h.learner_id, u.name AS learner, t.project_id, t.id AS task_id, t.title AS task_title,"
        " h.message, h.status, h.created_at FROM help_requests h JOIN users u ON u.id = h.learner_id"
        f" JOIN tasks t ON t.pk = h.task_pk {where} ORDER BY h.id LIMIT ?",
        (*params, limit),
    )
    return [HelpRequestRow(**{key: row[key] for key in HelpRequestRow.model_fields}) for row in rows]


def resolve_help_request(conn: DbConnection, request_id: int, resolver_id: int) -> bool:
    cursor = conn.execute(
        "UPDATE help_requests SET status = 'resolved', resolved_by = ?, resolved_at = ? WHERE id = ? AND status = 'open'",
        (resolver_id, utc_now(), request_id),
    )
    return cursor.rowcount == 1
