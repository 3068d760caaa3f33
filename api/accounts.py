"""The signed-in user's own account (SPEC 17): sign-up, their password, their API tokens.

    GET    /api/auth/options        what the sign-in page offers (public: is sign-up on?)
    POST   /api/signup              {"name","password"}: a plain user, signed in (SIGNUP_ENABLED)
    POST   /api/me/password         {"current","new"}: other password sign-ins end
    GET    /api/tokens              the user's tokens, never their secrets
    POST   /api/tokens              {"label"?}: a new token, its secret shown once
    DELETE /api/tokens/<id>         revoke one (another user's id answers 404, as a missing one)

Sign-up off answers 403 `signup_disabled` (not 404: the sign-in page asks `GET /api/auth/options`
and a client that tries anyway learns why). Every password change or sign-up spends the
`login` budget and waits for a hashing place (`storage/passwords.py`), like a login.
"""

from __future__ import annotations

from flask import Blueprint, jsonify, request, session
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.auth import SESSION_KEY, UserOut, current_user, require_user, start_web_session
from api.bodies import json_body
from api.database import get_db
from api.declare import NOT_FOUND, Reply, budget, operation
from api.errors import ApiError, not_found
from api.refusal import refuse_unless
from api.services import services
from storage.db import transaction
from storage.passwords import MAX_BYTES, password_problem
from storage.users import (
    MAX_NAME_CHARS,
    DuplicateUserError,
    TokenInfo,
    add_labelled_token,
    create_account,
    name_problem,
    password_hash_of,
    revoke_token_of,
    set_password_hash,
    tokens_of,
)
from storage.web_sessions import close_password_sessions

bp = Blueprint("accounts", __name__)

MAX_LABEL_CHARS = 100
MAX_ROW_ID = 2**63 - 1  # a larger id in the URL is a 404, not an OverflowError
BUSY = Reply("too many passwords are being checked at once (`busy`)", headers=("Retry-After",))


def checked_name(value: str) -> str:
    problem = name_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def checked_password(value: str) -> str:
    problem = password_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


class AuthOptions(BaseModel):
    signup: bool = Field(description="whether `POST /api/signup` creates accounts (SIGNUP_ENABLED)")
    password_login: bool = True


class SignupRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    password: str = Field(min_length=1, max_length=MAX_BYTES)

    _name = field_validator("name")(checked_name)
    _password = field_validator("password")(checked_password)


class PasswordChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    current: str = Field(default="", max_length=MAX_BYTES, description="empty when the user has no password yet")
    new: str = Field(min_length=1, max_length=MAX_BYTES)

    _new = field_validator("new")(checked_password)


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str | None = Field(default=None, max_length=MAX_LABEL_CHARS)


class TokenOut(BaseModel):
    id: int
    label: str | None
    created_at: str


class TokenList(BaseModel):
    tokens: list[TokenOut]


class NewToken(BaseModel):
    """A token just made: `token` is its secret, shown this once (only its hash is kept)."""

    token: str
    info: TokenOut


def token_out(info: TokenInfo) -> TokenOut:
    return TokenOut(id=info.id, label=info.label, created_at=info.created_at)


def new_token_answer(user_id: int, label: str | None) -> ResponseReturnValue:
    info, secret = add_labelled_token(get_db(), user_id, (label or "").strip() or None)
    return jsonify(NewToken(token=secret, info=token_out(info)).model_dump(mode="json")), 201


def address() -> str:
    return request.remote_addr or "unknown"


@bp.get("/api/auth/options")
@operation("What the sign-in page offers: whether sign-up is on", auth=False, replies={200: Reply("", AuthOptions)})
def auth_options() -> ResponseReturnValue:
    return jsonify(AuthOptions(signup=services().settings.signup_enabled).model_dump(mode="json"))


@bp.post("/api/signup")
@operation(
    "Create a plain user with a name and password and sign in (only with SIGNUP_ENABLED=1)",
    auth=False,
    body=SignupRequest,
    replies={
        200: Reply("signed up and signed in; the answer sets an HttpOnly cookie", UserOut),
        403: Reply("sign-up is off (`signup_disabled`)"),
        409: Reply("the name is taken (`name_taken`)"),
        503: BUSY,
    },
)
@budget(by_view=("login",))
def signup() -> ResponseReturnValue:
    if not services().settings.signup_enabled:
        raise ApiError(403, "signup_disabled", "sign-up is off on this server: ask an admin for an account")
    refuse_unless(services().rate_limiter.hit("login", "signup", address()))
    data = json_body(SignupRequest)
    hashed = services().passwords.hash(data.password, key=address())
    try:
        user, _ = create_account(get_db(), data.name, "user", hashed, with_token=False)
    except DuplicateUserError as error:
        raise ApiError(409, "name_taken", "that name is taken: choose another") from error
    return start_web_session(user, None)


@bp.post("/api/me/password")
@operation(
    "Change (or set) the signed-in user's password; their other password sign-ins end",
    body=PasswordChange,
    replies={
        204: Reply("changed", media=()),
        401: Reply("`current` is wrong (`invalid_credentials`)"),
        503: BUSY,
    },
)
@budget(by_view=("login",))
def change_password() -> ResponseReturnValue:
    require_user()
    user = current_user()
    data = json_body(PasswordChange)
    refuse_unless(services().rate_limiter.hit("login", "name", user.name))
    passwords = services().passwords
    conn = get_db()
    stored = password_hash_of(conn, user.id)
    if stored is not None and not passwords.verify(stored, data.current, key=user.id)[0]:
        raise ApiError(401, "invalid_credentials", "the current password is wrong")
    hashed = passwords.hash(data.new, key=user.id)
    keep = str(session[SESSION_KEY]) if SESSION_KEY in session else None
    with transaction(conn):
        set_password_hash(conn, user.id, hashed)
        close_password_sessions(conn, user.id, keep=keep)
    return "", 204


@bp.get("/api/tokens")
@operation("The signed-in user's API tokens (never their secrets)", replies={200: Reply("the tokens", TokenList)})
def my_tokens() -> ResponseReturnValue:
    require_user()
    found = tokens_of(get_db(), current_user().id)
    return jsonify(TokenList(tokens=[token_out(info) for info in found]).model_dump(mode="json"))


@bp.post("/api/tokens")
@operation(
    "Create an API token for the signed-in user; its secret is in this answer only",
    body=TokenRequest,
    body_optional=True,
    replies={201: Reply("the new token", NewToken)},
)
def create_my_token() -> ResponseReturnValue:
    require_user()
    data = json_body(TokenRequest, optional=True)
    return new_token_answer(current_user().id, data.label)


@bp.delete(f"/api/tokens/<int(max={MAX_ROW_ID}):token_id>")
@operation(
    "Revoke one of the signed-in user's tokens (web sessions it opened end)",
    replies={204: Reply("revoked", media=()), 404: NOT_FOUND},
)
def revoke_my_token(token_id: int) -> ResponseReturnValue:
    require_user()
    if not revoke_token_of(get_db(), current_user().id, token_id):
        raise not_found(f"token {token_id}")
    return "", 204
