"""`/sessions*`: list, create, read, rename, delete a user's sessions and page their messages."""

from __future__ import annotations

from typing import Annotated

from flask import Blueprint, jsonify, request
from pydantic import BaseModel, ConfigDict, StringConstraints

from api.bodies import json_body
from api.auth import current_user, require_user
from api.database import get_db
from api.errors import ApiError, not_found
from storage.messages import recent_messages
from storage.sessions import ChatSession, create_session, delete_session, get_session, list_sessions, rename_session

bp = Blueprint("sessions", __name__)
bp.before_request(require_user)

MAX_PAGE = 200
DEFAULT_PAGE = 50


SessionName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class SessionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: SessionName | None = None


class SessionRename(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: SessionName


def owned_session(session_id: str) -> ChatSession:
    session = get_session(get_db(), current_user().id, session_id)
    if session is None:
        raise not_found("session")
    return session


@bp.get("/sessions")
def index():  # type: ignore[no-untyped-def]
    sessions = list_sessions(get_db(), current_user().id)
    return jsonify({"sessions": [session.model_dump() for session in sessions]})


@bp.post("/sessions")
def create():  # type: ignore[no-untyped-def]
    body: SessionCreate = json_body(SessionCreate, optional=True)
    session = create_session(get_db(), current_user().id, body.name)
    return jsonify(session.model_dump()), 201


@bp.get("/sessions/<session_id>")
def show(session_id: str):  # type: ignore[no-untyped-def]
    return jsonify(owned_session(session_id).model_dump())


@bp.patch("/sessions/<session_id>")
def rename(session_id: str):  # type: ignore[no-untyped-def]
    owned_session(session_id)
    body: SessionRename = json_body(SessionRename)
    session = rename_session(get_db(), current_user().id, session_id, body.name)
    assert session is not None
    return jsonify(session.model_dump())


@bp.delete("/sessions/<session_id>")
def delete(session_id: str):  # type: ignore[no-untyped-def]
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
def messages(session_id: str):  # type: ignore[no-untyped-def]
    owned_session(session_id)
    limit = int_arg("limit", DEFAULT_PAGE, 1, MAX_PAGE) or DEFAULT_PAGE
    before = int_arg("before", None, 1, 2**62)
    page = recent_messages(get_db(), session_id, limit + 1, before_id=before)  # one extra row decides has_more
    return jsonify({"messages": [message.public() for message in page[-limit:]], "has_more": len(page) > limit})
