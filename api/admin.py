"""The admin's user management (SPEC 17): users and their tokens. Role `admin` only.

    GET    /api/admin/users                       every user (whether they have a password, how many tokens)
    POST   /api/admin/users                       {"name","role"?,"password"?,"token"?}: a password and/or a first token
    PATCH  /api/admin/users/<id>                  {"disabled"?,"role"?,"password"?}: disable/enable, role, reset password
    GET    /api/admin/users/<id>/tokens           their tokens (never the secrets)
    POST   /api/admin/users/<id>/tokens           {"label"?}: a new token, its secret shown once
    DELETE /api/admin/users/<id>/tokens/<tid>     revoke one

Anyone else gets 403 `forbidden` (like the instructor API: the admin page's existence is no
secret, and a signed-in user learns why). Disabling ends the user's web sessions and refuses
their tokens everywhere (`storage/users.py`); a reset password ends their password sign-ins.
No change may leave the server without an active admin: 409 `last_admin`.
"""

from __future__ import annotations

from typing import Literal

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.accounts import (
    BUSY,
    MAX_ROW_ID,
    NewToken,
    TokenList,
    TokenRequest,
    checked_name,
    checked_password,
    new_token_answer,
    token_out,
)
from api.auth import current_user, require_user
from api.bodies import json_body
from api.database import get_db
from api.declare import NOT_FOUND, Reply, operation
from api.errors import ApiError, not_found
from api.services import services
from storage.db import transaction
from storage.passwords import MAX_BYTES
from storage.users import (
    MAX_NAME_CHARS,
    DuplicateUserError,
    LastAdminError,
    UserSummary,
    create_account,
    list_users,
    revoke_token_of,
    set_password_hash,
    tokens_of,
    update_account,
    user_summary,
)
from storage.web_sessions import close_password_sessions

bp = Blueprint("admin", __name__)

Role = Literal["user", "instructor", "admin"]
ADMINS_ONLY = Reply("only admins (`forbidden`)")
# No `max` in the converter: Werkzeug answers 405 instead of 404 when a converter refuses a value
# on a path that two rules of different methods share; the range is checked in `summary_or_404`.
USER_PATH = "/api/admin/users/<int:user_id>"


class UserList(BaseModel):
    users: list[UserSummary]


class NewUser(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    role: Role = "user"
    password: str | None = Field(default=None, min_length=1, max_length=MAX_BYTES)
    token: bool = Field(
        default=False, strict=True, description="also make a first API token (its secret is in the answer)"
    )

    _name = field_validator("name")(checked_name)

    @field_validator("password")
    @classmethod
    def _password(cls, value: str | None) -> str | None:
        return None if value is None else checked_password(value)


class CreatedUser(BaseModel):
    user: UserSummary
    token: str | None = Field(description="the first token's secret, shown once; null without `token`")


class UserChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    disabled: bool | None = Field(default=None, strict=True)
    role: Role | None = None
    password: str | None = Field(default=None, min_length=1, max_length=MAX_BYTES, description="a new password")

    @field_validator("password")
    @classmethod
    def _password(cls, value: str | None) -> str | None:
        return None if value is None else checked_password(value)


@bp.before_request
def require_admin() -> None:
    require_user()
    if current_user().role != "admin":
        raise ApiError(403, "forbidden", "only admins can manage users")


def summary_or_404(user_id: int) -> UserSummary:
    found = user_summary(get_db(), user_id) if user_id <= MAX_ROW_ID else None
    if found is None:
        raise not_found(f"user {user_id}")
    return found


@bp.get("/api/admin/users")
@operation(
    "Every user, with whether they have a password and how many tokens",
    replies={200: Reply("", UserList), 403: ADMINS_ONLY},
)
def users() -> ResponseReturnValue:
    return jsonify(UserList(users=list_users(get_db())).model_dump(mode="json"))


@bp.post("/api/admin/users")
@operation(
    "Create a user with a password and/or a first API token",
    body=NewUser,
    replies={
        201: Reply("created", CreatedUser),
        400: Reply("neither a password nor a token (`invalid_request`)"),
        403: ADMINS_ONLY,
        409: Reply("the name is taken (`name_taken`)"),
        503: BUSY,
    },
)
def create_user() -> ResponseReturnValue:
    data = json_body(NewUser)
    if data.password is None and not data.token:
        raise ApiError(400, "invalid_request", "give the user a password, a token, or both: else nobody can sign in")
    hashed = None if data.password is None else services().passwords.hash(data.password, key=current_user().id)
    try:
        user, token = create_account(get_db(), data.name, data.role, hashed, with_token=data.token)
    except DuplicateUserError as error:
        raise ApiError(409, "name_taken", "that name is taken: choose another") from error
    return jsonify(CreatedUser(user=summary_or_404(user.id), token=token).model_dump(mode="json")), 201


@bp.patch(USER_PATH)
@operation(
    "Disable or enable a user, change their role, or reset their password",
    body=UserChange,
    replies={
        200: Reply("the user as changed", UserSummary),
        403: ADMINS_ONLY,
        404: NOT_FOUND,
        409: Reply("the change would leave no active admin (`last_admin`)"),
        503: BUSY,
    },
)
def change_user(user_id: int) -> ResponseReturnValue:
    data = json_body(UserChange)
    summary_or_404(user_id)
    hashed = None if data.password is None else services().passwords.hash(data.password, key=current_user().id)
    conn = get_db()
    try:
        update_account(conn, user_id, role=data.role, disabled=data.disabled)
    except LastAdminError as error:
        raise ApiError(409, "last_admin", str(error)) from error
    if hashed is not None:
        with transaction(conn):
            set_password_hash(conn, user_id, hashed)
            close_password_sessions(conn, user_id)
    return jsonify(summary_or_404(user_id).model_dump(mode="json"))


@bp.get(USER_PATH + "/tokens")
@operation(
    "A user's API tokens (never their secrets)", replies={200: Reply("", TokenList), 403: ADMINS_ONLY, 404: NOT_FOUND}
)
def user_tokens(user_id: int) -> ResponseReturnValue:
    summary_or_404(user_id)
    found = tokens_of(get_db(), user_id)
    return jsonify(TokenList(tokens=[token_out(info) for info in found]).model_dump(mode="json"))


@bp.post(USER_PATH + "/tokens")
@operation(
    "Create an API token for a user; its secret is in this answer only",
    body=TokenRequest,
    body_optional=True,
    replies={201: Reply("the new token", NewToken), 403: ADMINS_ONLY, 404: NOT_FOUND},
)
def create_user_token(user_id: int) -> ResponseReturnValue:
    summary_or_404(user_id)
    data = json_body(TokenRequest, optional=True)
    return new_token_answer(user_id, data.label)


@bp.delete(USER_PATH + f"/tokens/<int(max={MAX_ROW_ID}):token_id>")
@operation("Revoke a user's token", replies={204: Reply("revoked", media=()), 403: ADMINS_ONLY, 404: NOT_FOUND})
def revoke_user_token(user_id: int, token_id: int) -> ResponseReturnValue:
    if user_id > MAX_ROW_ID or not revoke_token_of(get_db(), user_id, token_id):
        raise not_found(f"token {token_id} of user {user_id}")
    return "", 204
