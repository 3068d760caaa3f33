"""The SQL kind's values: jobs, answers and errors, on both sides of the pipe (stdlib only).

A job travels as the `args` of a `bounded.jobs.Job` (`job_to_dict`); the worker's answer is
the job's JSON value, `{"ok": true, "answer": …}` or `{"ok": false, "error": {"code",
"message"}}` (`bounded/sql_jobs.py`), turned back into these values by `bounded/sql.py`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

MAX_REPLY_BYTES = 4 * 1024 * 1024  # answers are budgeted far below this; more means a broken worker

ErrorCode = Literal["VALIDATION_FAILED", "PERMISSION_DENIED", "TIMEOUT", "TOO_LARGE", "UNAVAILABLE", "BUSY"]


@dataclass(frozen=True)
class SqlError:
    """Why a job gave no answer, in words the model or the learner can act on."""

    code: ErrorCode
    message: str


def timeout_error(deadline_s: float) -> SqlError:
    """The one wording of a deadline, whether the worker stopped itself or was killed."""
    return SqlError("TIMEOUT", f"the query ran longer than {deadline_s:g} s and was stopped; add a LIMIT or simplify.")


@dataclass(frozen=True)
class MemoryJob:
    """`/memory_sql`: one statement over this user's views of the database file (read-only)."""

    database_path: str
    user_id: int
    sql: str
    deadline_s: float
    max_rows: int
    max_update_rows: int
    dry_run: bool = False  # classify; an UPDATE only records its changes as always; no SELECT runs
    kind: Literal["memory"] = "memory"


@dataclass(frozen=True)
class SelectJob:
    """A task's `sql_result` check: the instructor's setup script, then one read-only SELECT."""

    setup_sql: str
    sql: str
    deadline_s: float
    max_rows: int
    kind: Literal["select"] = "select"


Job = MemoryJob | SelectJob


@dataclass(frozen=True)
class Change:
    """One memory an UPDATE would change, with the values it had when the worker read it."""

    id: int
    old_content: str
    old_importance: int
    content: str
    importance: int


@dataclass(frozen=True)
class MemoryAnswer:
    """A SELECT's bounded rows, or the changes an UPDATE would make (not yet written)."""

    kind: Literal["select", "update"]
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    truncated_by: Literal["rows", "bytes", ""] = ""
    changes: list[Change] = field(default_factory=list)


@dataclass(frozen=True)
class SelectAnswer:
    """A learner's result, exact (blobs as hex), for comparison with the expected rows."""

    columns: list[str]
    rows: list[list[Any]]


def job_to_dict(job: Job) -> dict[str, Any]:
    return asdict(job)


def job_from_dict(data: dict[str, Any]) -> Job:
    kind = data.get("kind")
    if kind == "memory":
        return MemoryJob(**data)
    if kind == "select":
        return SelectJob(**data)
    raise ValueError(f"unknown job kind {kind!r}")


def memory_answer_from_dict(data: dict[str, Any]) -> MemoryAnswer:
    changes = [Change(**change) for change in data.pop("changes", [])]
    return MemoryAnswer(**data, changes=changes)


def select_answer_from_dict(data: dict[str, Any]) -> SelectAnswer:
    return SelectAnswer(**data)
