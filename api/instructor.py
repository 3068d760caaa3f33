"""The instructor surface of learner tasks (SPEC section 10): help requests and manual reviews.

    GET  /help-requests[?status=open|resolved]   learners' help requests, oldest first
    POST /help-requests/<id>/resolve             mark one answered
    GET  /task-reviews                           attempts waiting for a `manual` review
    POST /task-reviews/<id> {"passed", "note"?}  approve (the task closes) or reject (back to in_progress)

Only users whose role is `instructor` or `admin`; everyone else gets 403.
"""

from __future__ import annotations

from typing import Any, Literal

from flask import Blueprint, Response, jsonify, request
from pydantic import BaseModel, ConfigDict, Field

from api.auth import current_user, require_user
from api.bodies import json_body
from api.database import get_db
from api.declare import NOT_FOUND, Param, Reply, operation
from api.errors import ApiError, not_found
from learner.review import ReviewRefused, review_attempt
from learner.roles import is_staff
from storage.learner_tasks import (
    HelpRequestRow,
    get_task_by_pk,
    list_help_requests,
    pending_reviews,
    resolve_help_request,
)
from storage.users import get_user

MAX_ROW_ID = 2**63 - 1  # SQLite's largest INTEGER: a larger id in the URL is a 404, not an OverflowError (500)

bp = Blueprint("instructor", __name__)
STAFF_ONLY = Reply("only instructors and admins (`forbidden`)")


class HelpRequestList(BaseModel):
    help_requests: list[HelpRequestRow]


class Resolved(BaseModel):
    id: int
    status: Literal["resolved"]


class ReviewItem(BaseModel):
    """An attempt waiting for a `manual` review; task fields are null if the task was removed."""

    id: int
    learner: str | None
    learner_id: int
    project_id: str | None
    task_id: str | None
    attempt: int
    answer: str
    checks: list[dict[str, Any]]
    created_at: str


class ReviewList(BaseModel):
    reviews: list[ReviewItem]


class ReviewOutcome(BaseModel):
    id: int
    result: Literal["passed", "rejected"]
    status: str = Field(description="the learner's task status after the review")


@bp.before_request
def require_instructor() -> None:
    require_user()
    if not is_staff(current_user().role):
        raise ApiError(403, "forbidden", "only instructors (or admins) can see help requests and reviews")


@bp.get("/help-requests")
@operation(
    "Learners' help requests, oldest first",
    params=(Param("status", "query", {"type": "string", "enum": ["open", "resolved"]}),),
    replies={200: Reply("the requests", HelpRequestList), 400: Reply("a bad `status`"), 403: STAFF_ONLY},
)
def help_requests() -> Response:
    status = request.args.get("status")
    if status not in (None, "open", "resolved"):
        raise ApiError(400, "invalid_request", "status must be open or resolved (or left out for all)")
    rows = list_help_requests(get_db(), status)
    return jsonify(HelpRequestList(help_requests=rows).model_dump(mode="json"))


@bp.post(f"/help-requests/<int(max={MAX_ROW_ID}):request_id>/resolve")
@operation("Mark a help request answered", replies={200: Reply("resolved", Resolved), 403: STAFF_ONLY, 404: NOT_FOUND})
def resolve(request_id: int) -> Response:
    if not resolve_help_request(get_db(), request_id, current_user().id):
        raise not_found(f"open help request {request_id}")
    return jsonify(Resolved(id=request_id, status="resolved").model_dump(mode="json"))


@bp.get("/task-reviews")
@operation("Attempts waiting for a manual review", replies={200: Reply("the attempts", ReviewList), 403: STAFF_ONLY})
def reviews() -> Response:
    conn = get_db()
    items = []
    for attempt in pending_reviews(conn):
        task = get_task_by_pk(conn, attempt.task_pk)
        learner = get_user(conn, attempt.learner_id)
        items.append(
            ReviewItem(
                id=attempt.id,
                learner=learner.name if learner else None,
                learner_id=attempt.learner_id,
                project_id=task.project_id if task else None,
                task_id=task.id if task else None,
                attempt=attempt.attempt,
                answer=attempt.answer,
                checks=attempt.checks,
                created_at=attempt.created_at,
            )
        )
    return jsonify(ReviewList(reviews=items).model_dump(mode="json"))


class ReviewBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    passed: bool
    note: str = Field(default="", max_length=4000)


@bp.post(f"/task-reviews/<int(max={MAX_ROW_ID}):attempt_id>")
@operation(
    "Approve or reject an attempt",
    body=ReviewBody,
    replies={
        200: Reply("reviewed", ReviewOutcome),
        403: STAFF_ONLY,
        404: NOT_FOUND,
        409: Reply("the learner's task is not waiting for review (`invalid_state`)"),
    },
)
def review(attempt_id: int) -> Response:
    body = json_body(ReviewBody)
    done = review_attempt(get_db(), attempt_id, reviewer_id=current_user().id, passed=body.passed, note=body.note)
    if isinstance(done, ReviewRefused):
        if done.code == "not_waiting":
            raise not_found(f"attempt {attempt_id} waiting for review")
        raise ApiError(409, "invalid_state", f"the learner's task is {done.current}, not submitted")
    outcome = ReviewOutcome(id=attempt_id, result="passed" if body.passed else "rejected", status=done.status)
    return jsonify(outcome.model_dump(mode="json"))
