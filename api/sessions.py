"""`/sessions*`: list, create, read, rename, delete a user's sessions, page their messages,
see and stop the running turn (`active_turn`, `POST /sessions/<id>/cancel`)."""

from __future__ import annotations

from typing import Annotated, Literal

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints, model_validator

from api.auth import current_user, require_user
from api.bodies import json_body
from api.database import get_db
from api.declare import NOT_FOUND, Param, Reply, budget, operation, session_links
from api.errors import ApiError, not_found
from api.openapi.models import MessageOut, Versions, public_messages
from api.rate_limits import charge
from api.services import services
from api.settings import check_model
from storage.connection import DbConnection
from storage.messages import active_leaf, recent_messages, session_tree, siblings
from storage.sessions import (
    ChatSession,
    create_session,
    delete_session,
    get_session,
    list_sessions,
    pin_session,
    rename_session,
)
from storage.user_settings import session_model, set_session_model

bp = Blueprint("sessions", __name__)
bp.before_request(require_user)

MAX_PAGE = 200
DEFAULT_PAGE = 50


SessionName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class SessionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: SessionName | None = None


class SessionRename(BaseModel):
    """What to change; a field not named is kept. `model: null` forgets the session's choice."""

    model_config = ConfigDict(extra="forbid")
    name: SessionName | None = None
    pinned: StrictBool | None = Field(default=None, description="pinned chats are listed first")
    model: str | None = Field(default=None, max_length=300, description="a `GET /api/models` id, or null")

    @model_validator(mode="after")
    def names_something(self) -> SessionRename:
        if not self.model_fields_set:
            raise ValueError("name at least one field to change: `name`, `pinned` or `model`")
        for field in ("name", "pinned"):
            if field in self.model_fields_set and getattr(self, field) is None:
                raise ValueError(f"a session's `{field}` cannot be null")
        return self


class CancelBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turn_id: str | None = Field(default=None, max_length=100)


class ActiveTurn(BaseModel):
    """The session's running turn (or generation job): what a client needs to follow or stop it."""

    turn_id: str
    started_at: str
    kind: str = Field(description="`chat` (a turn) or `generation` (POST /activities/generate)")
    last_event_id: int = Field(description="the session's newest event id: a stream may resume after it")


class SessionList(BaseModel):
    sessions: list[ChatSession]


class SessionDetail(ChatSession):
    active_turn: ActiveTurn | None
    model: str | None = Field(
        default=None, description="the chain entry its turns start with (null: the chain's order)"
    )


class Cancelled(BaseModel):
    turn_id: str
    cancelled: Literal[True]


class MessagePage(BaseModel):
    """Up to `limit` messages of the branch on screen before `before`, oldest first; `has_more`
    says whether older ones exist. With `?tree=1`: every message of the session."""

    messages: list[MessageOut]
    has_more: bool
    active_leaf_id: int | None = Field(default=None, description="with `?tree=1`: the tip of the branch on screen")


def branch_page(conn: DbConnection, session_id: str, limit: int, before: int | None) -> MessagePage:
    """A page of the active branch, each message with its versions where it has some."""
    page = recent_messages(conn, session_id, limit + 1, before_id=before)  # one extra row decides has_more
    shown = page[-limit:]
    versions = siblings(conn, session_id, shown)
    out = public_messages(shown)
    for message in out:
        ids = versions.get(message.id)
        if ids:
            message.versions = Versions(index=ids.index(message.id) + 1, count=len(ids), ids=ids)
    return MessagePage(messages=out, has_more=len(page) > limit)


def active_turn(session_id: str) -> ActiveTurn | None:
    """The running turn, or None."""
    live = services().live
    lease = live.turns.active(session_id)
    if lease is None:
        return None
    return ActiveTurn(
        turn_id=lease.turn_id,
        started_at=lease.started_at,
        kind=lease.kind,
        last_event_id=live.bus.last_id(session_id) or lease.start_cursor,
    )


def new_session(name: str | None) -> ChatSession:
    """A new chat session of the current user; each spends one of their `sessions` budget
    (RATE_LIMITS), whichever endpoint creates it."""
    charge("sessions")
    return create_session(get_db(), current_user().id, name)


def owned_session(session_id: str) -> ChatSession:
    """The current user's session `session_id`, else 404 (another user's session too)."""
    session = get_session(get_db(), current_user().id, session_id)
    if session is None:
        raise not_found("session")
    return session


def session_for(session_id: str | None, name: str) -> ChatSession:
    """The session a request names (404 if it is not the user's), or a new one called `name`
    when it names none: the one get-or-create of every endpoint that starts a turn or a job."""
    return new_session(name) if session_id is None else owned_session(session_id)


@bp.get("/sessions")
@operation("The user's chat sessions", replies={200: Reply("pinned first, then newest first", SessionList)})
def index() -> ResponseReturnValue:
    sessions = list_sessions(get_db(), current_user().id)
    return jsonify(SessionList(sessions=sessions).model_dump(mode="json"))


@bp.post("/sessions")
@operation(
    "Create a chat session",
    body=SessionCreate,
    body_optional=True,
    replies={201: Reply("created", ChatSession, links=session_links("/id"))},
)
@budget(by_view=("sessions",))
def create() -> ResponseReturnValue:
    body: SessionCreate = json_body(SessionCreate, optional=True)
    return jsonify(new_session(body.name).model_dump(mode="json")), 201


@bp.get("/sessions/<session_id>")
@operation("One session, with its running turn", replies={200: Reply("the session", SessionDetail), 404: NOT_FOUND})
def show(session_id: str) -> ResponseReturnValue:
    detail = SessionDetail(
        **owned_session(session_id).model_dump(),
        active_turn=active_turn(session_id),
        model=session_model(get_db(), current_user().id, session_id),
    )
    return jsonify(detail.model_dump(mode="json"))


@bp.post("/sessions/<session_id>/cancel")
@operation(
    "Stop the running turn (SPEC 7a.5)",
    body=CancelBody,
    body_optional=True,
    replies={
        200: Reply("stopping; the turn ends with `done` and `stopped: true`", Cancelled),
        404: NOT_FOUND,
        409: Reply("no turn is running (`no_turn_in_progress`)"),
    },
)
def cancel(session_id: str) -> ResponseReturnValue:
    """Stop the running turn (SPEC 7a.5); the turn itself ends with `done` + `stopped: true`."""
    owned_session(session_id)
    body: CancelBody = json_body(CancelBody, optional=True)
    live = services().live
    turn_id = live.turns.cancel(session_id, body.turn_id)
    if turn_id is None:
        raise ApiError(
            409,
            "no_turn_in_progress",
            "no turn of this chat is running" + (f" with id {body.turn_id}" if body.turn_id else ""),
        )
    return jsonify(Cancelled(turn_id=turn_id, cancelled=True).model_dump(mode="json"))


@bp.patch("/sessions/<session_id>")
@operation(
    "Rename or pin a session, or choose the model its turns start with",
    body=SessionRename,
    replies={200: Reply("changed", SessionDetail), 400: Reply("`unknown_model`: not in the chain"), 404: NOT_FOUND},
)
def rename(session_id: str) -> ResponseReturnValue:
    owned_session(session_id)
    body: SessionRename = json_body(SessionRename)
    if "model" in body.model_fields_set:
        set_session_model(get_db(), current_user().id, session_id, check_model(body.model))
    if body.name is not None:
        rename_session(get_db(), current_user().id, session_id, body.name)
    if body.pinned is not None:
        pin_session(get_db(), current_user().id, session_id, body.pinned)
    return show(session_id)


@bp.delete("/sessions/<session_id>")
@operation("Delete a session and its messages", replies={204: Reply("deleted", media=()), 404: NOT_FOUND})
def delete(session_id: str) -> ResponseReturnValue:
    if not delete_session(get_db(), current_user().id, session_id):
        raise not_found("session")
    return "", 204


def int_arg(name: str, default: int | None, low: int, high: int) -> int | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "invalid_request", f"{name} must be an integer") from None
    if not low <= value <= high:
        raise ApiError(400, "invalid_request", f"{name} must be between {low} and {high}")
    return value


@bp.get("/sessions/<session_id>/messages")
@operation(
    "A page of the branch on screen (or, with `tree=1`, every message), oldest first",
    replies={200: Reply("the page", MessagePage), 400: Reply("a bad `limit` or `before`"), 404: NOT_FOUND},
    params=(
        Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": DEFAULT_PAGE}),
        Param("before", "query", {"type": "integer", "minimum": 1}, "the messages above this one on its branch"),
        Param("tree", "query", {"type": "integer", "enum": [0, 1]}, "1: every message of every version"),
    ),
)
def messages(session_id: str) -> ResponseReturnValue:
    owned_session(session_id)
    conn = get_db()
    limit = int_arg("limit", DEFAULT_PAGE, 1, MAX_PAGE) or DEFAULT_PAGE
    before = int_arg("before", None, 1, 2**62)
    if int_arg("tree", 0, 0, 1):
        tree = session_tree(conn, session_id)
        answer = MessagePage(
            messages=public_messages(tree), has_more=False, active_leaf_id=active_leaf(conn, session_id)
        )
        return jsonify(answer.model_dump(mode="json", exclude_unset=True))
    return jsonify(branch_page(conn, session_id, limit, before).model_dump(mode="json", exclude_unset=True))
