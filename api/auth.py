"""Bearer-token authentication (SPEC section 3).

`require_user` is installed as `before_request` on every protected blueprint: a missing or
wrong token answers 401 before any handler runs. The web UI may instead hold a signed
session cookie obtained by logging in with a token.
"""

from __future__ import annotations

from flask import g, request, session

from api.database import get_db
from api.errors import ApiError
from storage.users import User, get_user, user_for_token


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
    if user is None:
        raise ApiError(401, "unauthorized", "missing or invalid bearer token")
    g.user = user


def current_user() -> User:
    return g.user
