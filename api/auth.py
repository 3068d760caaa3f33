"""Bearer-token authentication (SPEC section 3), and the web UI's cookie login.

`require_user` is installed as `before_request` on every protected blueprint: a missing or
wrong token answers 401 before any handler runs. The web UI may instead hold a signed,
HttpOnly, SameSite=Strict session cookie (Secure as `COOKIE_SECURE` says) obtained by
`POST /api/login` with a token. The cookie carries only the random id of a server-side
session (`storage/web_sessions.py`): logging out, revoking the token that logged in, or
rotating the user's tokens ends it at once, whatever copy of the cookie exists. A cookie-authenticated request that changes
anything must also carry the `X-Requested-With` header, which a cross-site form cannot
send (CSRF).

Login attempts spend the `login` budget of RATE_LIMITS under two keys. A wrong token
counts against the client's address; a right one against its user at that address. The
token is checked first: it is a 256-bit secret, so no rate makes guessing it feasible, and
checking first means nobody's failures, not even from the same address (a school's NAT, a
reverse proxy), can lock a valid token out; a user can only exhaust their own logins.
"""

from __future__ import annotations

from flask import Blueprint, Flask, Request, current_app, g, has_request_context, jsonify, request, session
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from api.bodies import json_body
from api.database import get_db
from api.declare import Reply, budget, operation
from api.errors import ApiError
from api.refusal import refuse_unless
from api.services import services, services_of
from storage.users import User, find_token, user_for_token
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
    elif SESSION_KEY in session:
        user = web_session_user(get_db(), str(session[SESSION_KEY]))
        if user is not None and request.method not in SAFE_METHODS and not request.headers.get(CSRF_HEADER):
            raise ApiError(403, "csrf_header_missing", f"cookie-authenticated requests must send {CSRF_HEADER}")
    if user is None:
        raise ApiError(401, "unauthorized", "missing or invalid bearer token")
    request.environ[USER_KEY] = g.user = user


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
    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=200)


@bp.post("/api/login")
@operation(
    "Trade an API token for a session cookie (the web UI's login)",
    auth=False,
    body=LoginRequest,
    replies={
        200: Reply("logged in; the answer sets an HttpOnly cookie", UserOut),
        401: Reply("no such token (`unauthorized`)"),
    },
)
@budget(by_view=("login",))
def login() -> ResponseReturnValue:
    """Trade an API token for a session cookie (the web UI keeps no token in JS storage)."""
    data = json_body(LoginRequest)
    limiter = services().rate_limiter
    address = request.remote_addr or "unknown"
    conn = get_db()
    found = find_token(conn, data.token.strip())
    if found is None:
        refuse_unless(limiter.hit("login", "failed", address))
        raise ApiError(401, "unauthorized", "invalid token")
    user, token_id = found
    refuse_unless(limiter.hit("login", "user", str(user.id), address))
    session_id = open_web_session(conn, user.id, token_id, current_app.permanent_session_lifetime)
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
