"""An instructor's review of an attempt waiting for a `manual` check (SPEC section 10).

Approving closes the learner's task and rejecting sends it back to in_progress, by the one
transition table in `learner/progress.py`; the review, the status change and the note (kept
as a private comment for the learner) are written in one transaction or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from learner.progress import Moved, move
from storage.connection import DbConnection
from storage.db import transaction
from storage.learner_tasks import add_comment, get_attempt, record_review


@dataclass(frozen=True)
class Reviewed:
    """The review was recorded; `status` is the learner's task status after it."""

    status: str


@dataclass(frozen=True)
class ReviewRefused:
    """Nothing was written. `not_waiting`: no such attempt waits for review; `invalid_state`:
    the learner's task is no longer `submitted` (`current` says what it is)."""

    code: Literal["not_waiting", "invalid_state"]
    current: str | None = None


def review_attempt(
    conn: DbConnection,
    attempt_id: int,
    *,
    reviewer_id: int,
    passed: bool,
    note: str,
) -> Reviewed | ReviewRefused:
    """Record the verdict on attempt `attempt_id` and move the learner's task by it."""
    with transaction(conn):
        attempt = get_attempt(conn, attempt_id)
        if attempt is None or attempt.result != "pending_review":
            return ReviewRefused(code="not_waiting")
        moved = move(
            conn,
            learner_id=attempt.learner_id,
            task_pk=attempt.task_pk,
            action="review_pass" if passed else "review_reject",
            actor_id=reviewer_id,
            reason=note or None,
        )
        if not isinstance(moved, Moved):
            return ReviewRefused(code="invalid_state", current=moved.current)
        record_review(conn, attempt_id, reviewer_id=reviewer_id, passed=passed, note=note)
        if note:
            add_comment(conn, task_pk=attempt.task_pk, author_id=reviewer_id, learner_id=attempt.learner_id, text=note)
    return Reviewed(status=moved.new)
