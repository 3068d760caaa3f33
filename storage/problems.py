"""Activities, problems (with their hidden parts) and submissions.

`Problem` is the full stored record, used only by the judge path; `ProblemView` is what a
learner may see (statement and starter files: never the reference solution or the tests).
All reads are scoped by `user_id`: another user's ids read as missing.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from pydantic import BaseModel

from storage.connection import DbConnection, DbRow, inserted_id
from storage.db import utc_now

ActivityStatus = Literal["generating", "ready", "partial", "failed"]


class Activity(BaseModel):
    id: str
    session_id: str
    topic: str
    language: str
    difficulty: str
    requested: int
    status: str
    created_at: str
    updated_at: str


class ProblemView(BaseModel):
    """The learner's view of a problem."""

    id: str
    activity_id: str | None
    language: str
    difficulty: str
    title: str
    statement: str
    starter_files: dict[str, str]
    position: int
    created_at: str


class Problem(ProblemView):
    """The stored problem, hidden parts included (never serialised to a client)."""

    reference_files: dict[str, str]
    tests: list[dict[str, Any]]

    def view(self) -> ProblemView:
        return ProblemView(**self.model_dump(include=set(ProblemView.model_fields)))


class Submission(BaseModel):
    id: int
    problem_id: str
    language: str
    status: str
    verdict: dict[str, Any]
    created_at: str


def create_activity(
    conn: DbConnection, *, user_id: int, session_id: str, topic: str, language: str, difficulty: str, count: int
) -> Activity:
    now = utc_now()
    activity = Activity(
        id=uuid.uuid4().hex,
        session_id=session_id,
        topic=topic,
        language=language,
        difficulty=difficulty,
        requested=count,
        status="generating",
        created_at=now,
        updated_at=now,
    )
    conn.execute(
        "INSERT INTO activities(id, user_id, session_id, topic, language, difficulty, requested, status, created_at,"
        " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (activity.id, user_id, session_id, topic, language, difficulty, count, activity.status, now, now),
    )
    return activity


def set_activity_status(conn: DbConnection, activity_id: str, status: ActivityStatus) -> None:
    conn.execute("UPDATE activities SET status = ?, updated_at = ? WHERE id = ?", (status, utc_now(), activity_id))


def get_activity(conn: DbConnection, user_id: int, activity_id: str) -> Activity | None:
    row = conn.execute("SELECT * FROM activities WHERE id = ? AND user_id = ?", (activity_id, user_id)).fetchone()
    return Activity(**{key: row[key] for key in Activity.model_fields}) if row else None


def list_activities(conn: DbConnection, user_id: int) -> list[Activity]:
    rows = conn.execute("SELECT * FROM activities WHERE user_id = ? ORDER BY created_at DESC, rowid DESC", (user_id,))
    return [Activity(**{key: row[key] for key in Activity.model_fields}) for row in rows]


def add_problem(
    conn: DbConnection,
    *,
    user_id: int,
    activity_id: str | None,
    language: str,
    difficulty: str,
    title: str,
    statement: str,
    starter_files: dict[str, str],
    reference_files: dict[str, str],
    tests: list[dict[str, Any]],
    position: int = 0,
) -> Problem:
    problem = Problem(
        id=uuid.uuid4().hex,
        activity_id=activity_id,
        language=language,
        difficulty=difficulty,
        title=title,
        statement=statement,
        starter_files=starter_files,
        position=position,
        created_at=utc_now(),
        reference_files=reference_files,
        tests=tests,
    )
    conn.execute(
        "INSERT INTO problems(id, activity_id, user_id, language, difficulty, title, statement, starter_files,"
        " reference_files, tests, position, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            problem.id,
            activity_id,
            user_id,
            language,
            difficulty,
            title,
            statement,
            json.dumps(starter_files),
            json.dumps(reference_files),
            json.dumps(tests),
            position,
            problem.created_at,
        ),
    )
    return problem


def _problem(row: DbRow) -> Problem:
    return Problem(
        id=row["id"],
        activity_id=row["activity_id"],
        language=row["language"],
        difficulty=row["difficulty"],
        title=row["title"],
        statement=row["statement"],
        starter_files=json.loads(row["starter_files"]),
        position=row["position"],
        created_at=row["created_at"],
        reference_files=json.loads(row["reference_files"]),
        tests=json.loads(row["tests"]),
    )


def get_problem(conn: DbConnection, user_id: int, problem_id: str) -> Problem | None:
    row = conn.execute("SELECT * FROM problems WHERE id = ? AND user_id = ?", (problem_id, user_id)).fetchone()
    return _problem(row) if row else None


def activity_problems(conn: DbConnection, user_id: int, activity_id: str) -> list[Problem]:
    rows = conn.execute(
        "SELECT * FROM problems WHERE activity_id = ? AND user_id = ? ORDER BY position, created_at",
        (activity_id, user_id),
    )
    return [_problem(row) for row in rows]


def add_submission(
    conn: DbConnection,
    *,
    user_id: int,
    problem_id: str,
    language: str,
    files: dict[str, str],
    verdict: dict[str, Any],
) -> Submission:
    now = utc_now()
    cursor = conn.execute(
        "INSERT INTO submissions(problem_id, user_id, language, files, status, verdict, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (problem_id, user_id, language, json.dumps(files), verdict["status"], json.dumps(verdict), now),
    )
    return Submission(
        id=inserted_id(cursor),
        problem_id=problem_id,
        language=language,
        status=verdict["status"],
        verdict=verdict,
        created_at=now,
    )
