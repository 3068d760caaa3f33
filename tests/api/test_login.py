"""The web UI's cookie login: token -> HttpOnly SameSite cookie, CSRF header on writes."""

from __future__ import annotations

from typing import Any

import pytest

from api.services import services_of
from tests.conftest import new_token


@pytest.fixture
def base_settings(base_settings: dict[str, Any], backend_settings: dict[str, str]) -> dict[str, Any]:
    """Every test here runs on both backends: SQLite and PostgreSQL (tests/pg_support.py)."""
    return {**base_settings, **backend_settings}


def test_login_sets_a_cookie_that_authenticates(client, token):
    response = client.post("/api/login", json={"token": token})
    assert response.status_code == 200 and response.get_json()["name"] == "alice"
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert client.get("/api/me").get_json()["name"] == "alice"
    assert client.get("/sessions").status_code == 200


def test_cookie_writes_need_the_csrf_header(client, token, fake_llm):
    client.post("/api/login", json={"token": token})
    refused = client.post("/sessions", json={})
    assert refused.status_code == 403 and refused.get_json()["error"]["code"] == "csrf_header_missing"
    assert client.post("/sessions", json={}, headers={"X-Requested-With": "fetch"}).status_code == 201


def test_bad_login_and_logout(client, token):
    assert client.post("/api/login", json={"token": "nope"}).status_code == 401
    assert client.post("/api/login", json={}).status_code == 400
    assert client.post("/api/login", data="x").status_code == 400
    client.post("/api/login", json={"token": token})
    assert client.post("/api/logout").status_code == 204
    assert client.get("/api/me").status_code == 401


def test_secret_key_survives_a_restart(make_app, token, tmp_path):
    first = make_app().config["SECRET_KEY"]
    assert make_app().config["SECRET_KEY"] == first


# server-side sessions ---------------------------------------------------------------------------


def login_cookie(client) -> str:  # type: ignore[no-untyped-def]
    cookie = client.get_cookie("session")
    assert cookie is not None
    return cookie.value


def test_the_cookie_carries_only_an_opaque_session_id(client, token):
    client.post("/api/login", json={"token": token})
    with client.session_transaction() as session:
        assert set(session) - {"_permanent"} == {"sid"} and len(session["sid"]) >= 40  # no user id


def test_logout_ends_the_session_for_every_copy_of_the_cookie(app, client, token):
    client.post("/api/login", json={"token": token})
    thief = app.test_client()
    thief.set_cookie("session", login_cookie(client))
    assert thief.get("/api/me").status_code == 200
    assert client.post("/api/logout").status_code == 204
    assert thief.get("/api/me").status_code == 401
    assert thief.get("/sessions").status_code == 401


def test_revoking_or_rotating_the_token_ends_its_web_sessions(app, client, token):
    from storage.users import find_token, replace_tokens, revoke_token

    client.post("/api/login", json={"token": token})
    assert client.get("/api/me").status_code == 200
    with services_of(app).database.connection() as conn:
        user, token_id = find_token(conn, token)
        assert revoke_token(conn, token_id)
    assert client.get("/api/me").status_code == 401

    with services_of(app).database.connection() as conn:
        fresh = replace_tokens(conn, user.id)
    client.post("/api/login", json={"token": fresh})
    assert client.get("/api/me").status_code == 200
    with services_of(app).database.connection() as conn:
        replace_tokens(conn, user.id)
    assert client.get("/api/me").status_code == 401
    assert client.post("/api/login", json={"token": fresh}).status_code == 401


def test_a_cookie_of_the_old_kind_naming_a_user_is_refused(client, token):
    with client.session_transaction() as session:
        session["user_id"] = 1  # what a signed cookie held before sessions lived on the server
    assert client.get("/api/me").status_code == 401


def test_an_expired_session_is_refused(app, client, token):
    client.post("/api/login", json={"token": token})
    with services_of(app).database.connection() as conn:
        conn.execute("UPDATE web_sessions SET expires_at = '2000-01-01T00:00:00.000Z'")
    assert client.get("/api/me").status_code == 401


def test_each_user_keeps_a_bounded_number_of_web_sessions(make_app, fake_llm):
    from storage.web_sessions import MAX_PER_USER, count_web_sessions
    from tests.conftest import new_token

    app = make_app(llm_base_url=fake_llm.openai_base_url, rate_limits="login=off")
    token = new_token(app)
    first = app.test_client()
    first.post("/api/login", json={"token": token})
    for _ in range(MAX_PER_USER + 5):
        assert app.test_client().post("/api/login", json={"token": token}).status_code == 200
    with services_of(app).database.connection() as conn:
        assert count_web_sessions(conn, 2) == MAX_PER_USER
    assert first.get("/api/me").status_code == 401  # the oldest one was ended


# the login budget -------------------------------------------------------------------------------


def test_failed_logins_are_limited_per_address_and_never_lock_out_a_valid_token(make_app, fake_llm):
    from tests.conftest import new_token

    app = make_app(llm_base_url=fake_llm.openai_base_url, rate_limits="login=3/minute")
    token, client = new_token(app), app.test_client()
    assert [client.post("/api/login", json={"token": f"oct_guess{n}"}).status_code for n in range(4)] == [
        401,
        401,
        401,
        429,
    ]
    refused = client.post("/api/login", json={"token": "oct_again"})
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert refused.get_json()["error"]["details"]["limit"] == "login"
    # same address, but a valid token: someone else's failures never lock it out
    assert client.post("/api/login", json={"token": token}).status_code == 200
    # another address has a budget of its own
    other = client.post("/api/login", json={"token": "oct_x"}, environ_base={"REMOTE_ADDR": "10.0.0.7"})
    assert other.status_code == 401


def test_successful_logins_are_limited_per_user_and_address(make_app, fake_llm):
    from tests.conftest import new_token

    app = make_app(llm_base_url=fake_llm.openai_base_url, rate_limits="login=2/minute")
    alice, bob = new_token(app, "alice"), new_token(app, "bob")
    client = app.test_client()
    assert [client.post("/api/login", json={"token": alice}).status_code for _ in range(3)] == [200, 200, 429]
    assert client.post("/api/login", json={"token": bob}).status_code == 200
    elsewhere = client.post("/api/login", json={"token": alice}, environ_base={"REMOTE_ADDR": "10.0.0.8"})
    assert elsewhere.status_code == 200


# COOKIE_SECURE ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "scheme", "secure"),
    [("auto", "http", False), ("auto", "https", True), ("1", "http", True), ("0", "https", False)],
)
def test_the_cookie_is_secure_as_cookie_secure_says(make_app, fake_llm, choice, scheme, secure):
    app = make_app(llm_base_url=fake_llm.openai_base_url, cookie_secure=choice)
    client = app.test_client()
    token = new_token(app)
    response = client.post("/api/login", json={"token": token}, base_url=f"{scheme}://localhost")
    assert response.status_code == 200
    attributes = [part.strip() for part in response.headers["Set-Cookie"].split(";")]
    assert ("Secure" in attributes) is secure
    logout = client.post("/api/logout", base_url=f"{scheme}://localhost")
    assert ("Secure" in [part.strip() for part in logout.headers["Set-Cookie"].split(";")]) is secure
