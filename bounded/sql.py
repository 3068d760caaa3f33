"""The server's side of untrusted SQL: run a `/memory_sql` or `sql_result` job in the pool.

`run_memory(pool, job)` / `run_select(pool, job)` run the job in a warm worker of the SQL
kind (`kinds.SQL`) with `SETUP_TIMEOUT_S` for the trusted set-up and the job's own deadline
for the statement, and turn every way the job can end into an answer or a `SqlError` in
words the model or the learner can act on (the one place that wording lives). The worker's
progress handler answers TIMEOUT at the deadline for ordinary loops; one that does not
answer (one slow function call, memory being allocated) is killed `KILL_GRACE_S` later.
"""

from __future__ import annotations

from typing import Any

from bounded.jobs import Done, Failure, Job, JobFailed, Limits
from bounded.kinds import SQL
from bounded.pool import WorkerPool
from bounded.sql_values import (
    MAX_REPLY_BYTES,
    MemoryAnswer,
    MemoryJob,
    SelectAnswer,
    SelectJob,
    SqlError,
    job_to_dict,
    memory_answer_from_dict,
    select_answer_from_dict,
    timeout_error,
)
from foundation.cancellation import NEVER, Cancelled, CancelToken

SETUP_TIMEOUT_S = 5.0  # trusted set-up: start-up, views, a task's setup script
STOPPED = SqlError(
    "TOO_LARGE",
    "the query was stopped: it needed more memory or time than allowed; add a LIMIT or select fewer or shorter values.",
)


def run_memory(
    pool: WorkerPool, job: MemoryJob, cancel: CancelToken = NEVER, *, user: int | None = None
) -> MemoryAnswer | SqlError:
    reply = _run(pool, job, cancel, user)
    return reply if isinstance(reply, SqlError) else memory_answer_from_dict(reply)


def run_select(
    pool: WorkerPool, job: SelectJob, cancel: CancelToken = NEVER, *, user: int | None = None
) -> SelectAnswer | SqlError:
    reply = _run(pool, job, cancel, user)
    return reply if isinstance(reply, SqlError) else select_answer_from_dict(reply)


def _run(
    pool: WorkerPool, job: MemoryJob | SelectJob, cancel: CancelToken, user: int | None
) -> dict[str, Any] | SqlError:
    """The answer's dict, or why there is none (run in `user`'s fair share); raises Cancelled when `cancel` fired."""
    cancel.raise_if_cancelled()
    limits = Limits(wall_s=job.deadline_s, output_bytes=MAX_REPLY_BYTES, setup_s=SETUP_TIMEOUT_S)
    outcome = pool.run(SQL, Job("bounded.sql_jobs:run", job_to_dict(job)), limits, cancel, user=user)
    if isinstance(outcome, JobFailed):
        if outcome.kind is Failure.CANCELLED:
            raise Cancelled(cancel.reason or "cancelled")
        return _failure(outcome, job.deadline_s)
    return _answer(outcome)


def _answer(outcome: Done) -> dict[str, Any] | SqlError:
    value = outcome.value if isinstance(outcome.value, dict) else {}
    if value.get("ok") is True and isinstance(value.get("answer"), dict):
        return dict(value["answer"])
    error: dict[str, Any] = value["error"] if isinstance(value.get("error"), dict) else {}
    code = error.get("code", "UNAVAILABLE")
    if code not in ("VALIDATION_FAILED", "PERMISSION_DENIED", "TIMEOUT", "TOO_LARGE", "UNAVAILABLE"):
        code = "UNAVAILABLE"
    return SqlError(code, str(error.get("message", "the SQL engine failed")))


def _failure(failed: JobFailed, deadline_s: float) -> SqlError:
    if failed.kind is Failure.TIMEOUT:
        return timeout_error(deadline_s)
    if failed.kind is Failure.MEMORY:
        return SqlError(
            "TOO_LARGE", "the query needs more memory than allowed; add a LIMIT or select fewer or shorter values."
        )
    if failed.kind is Failure.BUSY:
        return SqlError("BUSY", "the server is busy with other users' SQL; try again in a moment.")
    if failed.kind is Failure.CLOSED:
        return SqlError("UNAVAILABLE", "the SQL engine is shut down.")
    if failed.kind is Failure.UNAVAILABLE:
        return SqlError("UNAVAILABLE", f"the SQL engine cannot run the query now ({failed.detail}); try again later.")
    return STOPPED  # the worker died (its address-space or CPU limit), or its answer was too large
