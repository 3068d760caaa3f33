"""Bearer-token authentication (SPEC section 3), and the web UI's cookie login.

`require_user` is installed as `before_request` on every protected blueprint: a missing or
wrong token answers 401 before any handler runs. The web UI may instead hold a signed,
HttpOnly, SameSite=Strict session cookie obtained by `POST /api/login` with a token. A
cookie-authenticated request that changes anything must also carry the
`X-Requested-With` header, which a cross-site form cannot send (CSRF).
"""

from __future__ import annotations

from flask import Blueprint, g, jsonify, request, session
from pydantic import BaseModel, ConfigDict, Field

from api.bodies import json_body
from api.database import get_db
from api.errors import ApiError
from storage.users import User, get_user, user_for_token

CSRF_HEADER = "X-Requested-With"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

bp = Blueprint("auth", __name__)


def bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def require_user() -> None:
    token = bearer_token()
    user: User | None = None
    if token is not None:
        user = user_for_token(get_db(), token)
    elif "user_id" in session:
        user = get_user(get_db(), int(session["user_id"]))
        if user is not None and request.method not in SAFE_METHODS and not request.headers.get(CSRF_HEADER):
            raise ApiError(403, "csrf_header_missing", f"cookie-authenticated requests must send {CSRF_HEADER}")
    if user is None:
        raise ApiError(401, "unauthorized", "missing or invalid bearer token")
    g.user = user


def current_user() -> User:
    return g.user


class LoginRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=200)


@bp.post("/api/login")
def login():  # type: ignore[no-untyped-def]
    """Trade an API token for a session cookie (the web UI keeps no token in JS storage)."""
    data = json_body(LoginRequest)
    user = user_for_token(get_db(), data.token.strip())
    if user is None:
        raise ApiError(401, "unauthorized", "invalid token")
    session.clear()
    session["user_id"] = user.id
    session.permanent = True
    return jsonify({"id": user.id, "name": user.name, "role": user.role})


@bp.post("/api/logout")
def logout():  # type: ignore[no-untyped-def]
    session.clear()
    return "", 204


@bp.get("/api/me")
def me():  # type: ignore[no-untyped-def]
    require_user()
    user = current_user()
    return jsonify({"id": user.id, "name": user.name, "role": user.role})
