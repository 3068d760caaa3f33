"""Versions of a chat (SPEC 17): answer a user message anew, and pick the version on screen.

A chat is a tree of messages (`storage.messages`); the branch on screen ends at the session's
active leaf. `POST /chat {"edit_of"}` (`api/chat.py`) starts a new version of a user message;
here `POST /sessions/<id>/regenerate` starts a new answer to one (also the Retry of a failed
turn) and `POST /sessions/<id>/branch` shows another version. Both take the session's claim,
so a version never changes under a running turn.
"""

from __future__ import annotations

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from api.auth import current_user, require_user
from api.bodies import json_body
from api.chat import TURN_STREAM
from api.database import get_db
from api.declare import NOT_FOUND, TURN_FAILED, Reply, budget, operation
from api.errors import ApiError, not_found
from api.services import services as app_services
from api.sessions import DEFAULT_PAGE, MessagePage, branch_page, owned_session
from api.turns import answer_turn, desk, turn_work
from pipeline.starts import Regenerate
from storage.connection import DbConnection
from storage.messages import Message, newest_leaf_below, session_message, set_active_leaf
from storage.roles import USER

bp = Blueprint("versions", __name__)
bp.before_request(require_user)

MAX_TURN_ROWS = 64  # rows between an answer and its user message: a turn stores far fewer (MAX_TOOL_ROUNDS <= 5)


class VersionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message_id: int = Field(ge=1, le=2**62, description="a message of this session")


def message_of(conn: DbConnection, session_id: str, message_id: int) -> Message:
    """A message of this session, else 404 (another session's message too)."""
    message = session_message(conn, session_id, message_id)
    if message is None:
        raise not_found("message")
    return message


def answered_message(conn: DbConnection, session_id: str, message: Message) -> Message:
    """The user message `message` answers: itself, or the nearest user message above it."""
    current: Message | None = message
    for _ in range(MAX_TURN_ROWS):
        if current is None:
            break
        if current.role == USER:
            return current
        current = session_message(conn, session_id, current.parent_id) if current.parent_id else None
    raise ApiError(400, "invalid_request", "this message answers no user message of the chat")


@bp.post("/sessions/<session_id>/regenerate")
@operation(
    "Answer a user message anew, as a new version (also the Retry of a failed turn)",
    tag="chat",
    body=VersionRequest,
    description=(
        "`message_id`: a user message, or any row of its answer. The old answer stays as another "
        "version; the context is the branch up to and including that user message, which is not "
        "stored again. Answers like POST /chat (JSON, or SSE with `Accept: text/event-stream`)."
    ),
    replies={200: TURN_STREAM, 404: NOT_FOUND, **TURN_FAILED},
)
@budget("turns")  # it calls the model again
def regenerate(session_id: str) -> ResponseReturnValue:
    body: VersionRequest = json_body(VersionRequest)
    owned_session(session_id)
    user = current_user()
    question = answered_message(get_db(), session_id, message_of(get_db(), session_id, body.message_id))
    services = app_services().turns
    with desk().claim(session_id, user_id=user.id) as claim:  # 409 turn_in_progress before anything moves
        return answer_turn(claim, turn_work(services, user.id, session_id, Regenerate(question)))


@bp.post("/sessions/<session_id>/branch")
@operation(
    "Show the version that contains a message",
    tag="sessions",
    body=VersionRequest,
    description=(
        "The branch on screen becomes the newest version below `message_id`; the next turn's "
        "context is that branch. Answers the branch like GET /sessions/<id>/messages."
    ),
    replies={
        200: Reply("the branch now on screen (its newest page)", MessagePage),
        404: NOT_FOUND,
        409: Reply("the chat is answering (`turn_in_progress`)"),
    },
)
def branch(session_id: str) -> ResponseReturnValue:
    body: VersionRequest = json_body(VersionRequest)
    owned_session(session_id)
    conn = get_db()
    message_of(conn, session_id, body.message_id)
    with desk().claim(session_id, user_id=current_user().id):  # never under a running turn: it moves the branch
        set_active_leaf(conn, session_id, newest_leaf_below(conn, session_id, body.message_id))
    return jsonify(branch_page(conn, session_id, DEFAULT_PAGE, None).model_dump(mode="json", exclude_unset=True))
