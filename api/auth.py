"""Bearer-token authentication (SPEC section 3), and the web UI's cookie login.

`require_user` is installed as `before_request` on every protected blueprint: a missing or
wrong token answers 401 before any handler runs. The web UI may instead hold a signed,
HttpOnly, SameSite=Strict session cookie (Secure as `COOKIE_SECURE` says) obtained by
`POST /api/login` with a token, or with a name and password (SPEC 17). The cookie carries only the random id of a server-side
session (`storage/web_sessions.py`): logging out, revoking the token that logged in, or
rotating the user's tokens ends it at once, whatever copy of the cookie exists. A cookie-authenticated request that changes
anything must also carry the `X-Requested-With` header, which a cross-site form cannot
send (CSRF).

Login attempts spend the `login` budget of RATE_LIMITS under two keys. A wrong token
counts against the client's address; a right one against its user at that address. The
token is checked first: it is a 256-bit secret, so no rate makes guessing it feasible, and
checking first means nobody's failures, not even from the same address (a school's NAT, a
reverse proxy), can lock a valid token out; a user can only exhaust their own logins.

A password is the opposite: guessable, and costly to check (argon2, `storage/passwords.py`).
So every password attempt spends the budget of its client's address first (the bound on the
hashes one address can cause), and only then is a hash computed, in one of the process's few
hashing places; a login that finds none free answers 503 `busy` at once (no web thread waits).
A failed attempt is counted twice more: under its address and under the name it tried. A name
with a full window of failures (guessed from many addresses) is refused before any hash, but
only to addresses that have failed themselves: the account's owner, signing in from an address
that never failed, is not locked out by someone else's guesses, and each fresh address of a
guesser costs it one guess. A wrong name and a wrong password answer the same 401
`invalid_credentials` after the same work (an unknown name is checked against a dummy hash). A
disabled user is told so (403 `account_disabled`) only after the right password or with one of
their tokens, never to a guesser.
"""

from __future__ import annotations

from flask import Blueprint, Flask, Request, current_app, g, has_request_context, jsonify, request, session
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.bodies import json_body
from api.database import get_db
from api.declare import Reply, budget, operation
from api.errors import ApiError
from api.refusal import refuse_unless
from api.services import services, services_of
from storage.passwords import MAX_BYTES
from storage.users import (
    MAX_NAME_CHARS,
    User,
    find_token,
    login_record,
    set_password_hash,
    token_of_disabled_user,
    user_for_token,
)
from storage.web_sessions import close_web_session, open_web_session, web_session_user

CSRF_HEADER = "X-Requested-With"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SESSION_KEY = "sid"  # the only value in the signed cookie: a server-side session's id
USER_KEY = "orchestrator.user"  # in the WSGI environ: this request's authenticated user

bp = Blueprint("auth", __name__)


class CookieSessions(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, without building a signer for a request that has no
    cookie (every bearer-token call): Flask builds one per request before it looks, work a
    request without a cookie never needs. A request with a cookie is read as before."""

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        if app.secret_key and not request.cookies.get(self.get_cookie_name(app)):
            return self.session_class()
        return super().open_session(app, request)

    def get_cookie_secure(self, app: Flask) -> bool:
        """`COOKIE_SECURE`: `1` always, `0` never, `auto` when this request came over HTTPS (the
        connection's scheme, or `X-Forwarded-Proto` from a proxy of `TRUSTED_PROXIES`)."""
        choice = services_of(app).settings.cookie_secure
        if choice == "auto":
            return has_request_context() and request.is_secure
        return choice == "1"


def bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def require_user() -> None:
    """Authenticate the request once: later calls for the same request reuse the answer.

    The answer is kept in the request's own environ, not only on `g`: `g` lives in the app
    context, which a streamed response (`stream_with_context`) can keep pushed while the
    same thread serves the next request, and must never carry one request's user into
    another."""
    known: User | None = request.environ.get(USER_KEY)
    if known is not None:
        g.user = known
        return
    token = bearer_token()
    user: User | None = None
    if token is not None:
        user = user_for_token(get_db(), token)
        if user is None and token_of_disabled_user(get_db(), token):
            raise disabled()
    elif SESSION_KEY in session:
        user = web_session_user(get_db(), str(session[SESSION_KEY]))
        if user is not None and request.method not in SAFE_METHODS and not request.headers.get(CSRF_HEADER):
            raise ApiError(403, "csrf_header_missing", f"cookie-authenticated requests must send {CSRF_HEADER}")
    if user is None:
        raise ApiError(401, "unauthorized", "missing or invalid bearer token")
    request.environ[USER_KEY] = g.user = user


def disabled() -> ApiError:
    return ApiError(403, "account_disabled", "this account is disabled; ask an admin to enable it")


def current_user() -> User:
    user: User = g.user  # set by require_user before any view that asks
    return user


class UserOut(BaseModel):
    """The signed-in user: what `POST /api/login` and `GET /api/me` answer."""

    id: int
    name: str
    role: str


def user_out(user: User) -> dict[str, object]:
    return UserOut(id=user.id, name=user.name, role=user.role).model_dump(mode="json")


class LoginRequest(BaseModel):
    """Either `token`, or `name` and `password`."""

    model_config = ConfigDict(extra="forbid")
    token: str | None = Field(default=None, min_length=1, max_length=200)
    name: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    password: str | None = Field(default=None, min_length=1, max_length=MAX_BYTES)

    @model_validator(mode="after")
    def one_way(self) -> LoginRequest:
        if (self.token is None) == (self.name is None and self.password is None):
            raise ValueError("send either `token`, or `name` and `password`")
        if self.token is None and (self.name is None or self.password is None):
            raise ValueError("send both `name` and `password`")
        return self


@bp.post("/api/login")
@operation(
    "Sign in with a name and password, or an API token: answers a session cookie (the web UI's login)",
    auth=False,
    body=LoginRequest,
    replies={
        200: Reply("signed in; the answer sets an HttpOnly cookie", UserOut),
        401: Reply("no such token (`unauthorized`), or a wrong name or password (`invalid_credentials`)"),
        403: Reply("the account is disabled (`account_disabled`)"),
        503: Reply("too many passwords are being checked at once (`busy`)", headers=("Retry-After",)),
    },
)
@budget(by_view=("login",))
def login() -> ResponseReturnValue:
    """Trade a password or an API token for a session cookie (the web UI keeps no secret in JS storage)."""
    data = json_body(LoginRequest)
    if data.token is None:
        assert data.name is not None and data.password is not None
        user = check_password(data.name, data.password)
        return start_web_session(user, None)
    limiter = services().rate_limiter
    address = request.remote_addr or "unknown"
    conn = get_db()
    found = find_token(conn, data.token.strip())
    if found is None:
        refuse_unless(limiter.hit("login", "failed", address))
        if token_of_disabled_user(conn, data.token.strip()):
            raise disabled()
        raise ApiError(401, "unauthorized", "invalid token")
    user, token_id = found
    refuse_unless(limiter.hit("login", "user", str(user.id), address))
    return start_web_session(user, token_id)


def check_password(name: str, password: str) -> User:
    """The user whose name and password these are, or 401 `invalid_credentials` (the budget
    spent and a hash computed either way); 403 for a disabled user with the right password."""
    limiter = services().rate_limiter
    address = request.remote_addr or "unknown"
    refuse_unless(limiter.hit("login", "password", address))
    clean = limiter.untouched("login", "failed-address", address)  # this address never guessed wrong
    if not clean:
        refuse_unless(limiter.allows("login", "failed-name", name))
    conn = get_db()
    record = login_record(conn, name)
    user, stored = record if record is not None else (None, None)
    matched, rehashed = services().passwords.verify(stored, password, key=address, clean=clean)
    if user is None or not matched:
        limiter.hit("login", "failed-address", address)
        limiter.hit("login", "failed-name", name)
        raise ApiError(401, "invalid_credentials", "wrong name or password")
    if user.disabled_at is not None:
        raise disabled()
    if rehashed is not None:  # hashed with older parameters: stored again with today's
        set_password_hash(conn, user.id, rehashed)
    return user


def start_web_session(user: User, token_id: int | None) -> ResponseReturnValue:
    session_id = open_web_session(get_db(), user.id, token_id, current_app.permanent_session_lifetime)
    session.clear()
    session[SESSION_KEY] = session_id
    session.permanent = True
    return jsonify(user_out(user))


@bp.post("/api/logout")
@operation("End the cookie session on the server", auth=False, replies={204: Reply("logged out", media=())})
def logout() -> ResponseReturnValue:
    """End the server-side session (a copy of the cookie is worthless afterwards)."""
    if SESSION_KEY in session:
        close_web_session(get_db(), str(session[SESSION_KEY]))
    session.clear()
    return "", 204


@bp.get("/api/me")
@operation("Who the token or cookie belongs to", replies={200: Reply("the user", UserOut)})
def me() -> ResponseReturnValue:
    require_user()
    return jsonify(user_out(current_user()))
