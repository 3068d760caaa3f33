"""Accounts (SPEC 17): passwords, sign-up, a user's own tokens, the admin API, disabled users.

Every test runs on SQLite and PostgreSQL (the storage changed: m104_accounts)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from argon2 import PasswordHasher
from flask import Flask

from api.services import services_of
from foundation.fair_share import Busy
from mcp_server.calls import user_of
from storage.passwords import Passwords
from storage.users import get_user_by_name, password_hash_of, set_password_hash
from tests.conftest import new_token

CSRF = {"X-Requested-With": "fetch"}
GOOD = "correct horse battery"


@pytest.fixture
def base_settings(base_settings: dict[str, Any], backend_settings: dict[str, str]) -> dict[str, Any]:
    return {**base_settings, **backend_settings}


def set_password(app: Flask, name: str, password: str) -> None:
    with services_of(app).database.connection() as conn:
        user = get_user_by_name(conn, name)
        assert user is not None
        set_password_hash(conn, user.id, services_of(app).passwords.hash(password, key="test"))


def admin_auth(app: Flask) -> dict[str, str]:
    token = Path(services_of(app).settings.auth_token_file).read_text().strip()
    return {"Authorization": f"Bearer {token}"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def error_code(response: Any) -> str:
    return str(response.get_json()["error"]["code"])


# signing in with a password ----------------------------------------------------------------------


def test_a_password_signs_in_with_a_cookie_and_the_token_path_still_works(app, client, token):
    set_password(app, "alice", GOOD)
    response = client.post("/api/login", json={"name": "alice", "password": GOOD})
    assert response.status_code == 200 and response.get_json()["name"] == "alice"
    assert "HttpOnly" in response.headers["Set-Cookie"]
    assert client.get("/api/me").get_json()["name"] == "alice"
    assert app.test_client().post("/api/login", json={"token": token}).status_code == 200


def test_a_wrong_name_and_a_wrong_password_answer_the_same_after_the_same_work(app, client, token):
    set_password(app, "alice", GOOD)
    passwords = services_of(app).passwords
    before = passwords.hashes
    wrong_password = client.post("/api/login", json={"name": "alice", "password": "not the password"})
    unknown_name = client.post("/api/login", json={"name": "nobody", "password": "not the password"})
    assert wrong_password.status_code == unknown_name.status_code == 401
    assert wrong_password.get_json() == unknown_name.get_json()
    assert error_code(unknown_name) == "invalid_credentials"
    assert passwords.hashes - before == 2  # the unknown name was checked against the dummy hash too
    # a user without a password cannot be signed into with any password
    new_token(app, "bob")
    assert client.post("/api/login", json={"name": "bob", "password": GOOD}).status_code == 401


def test_a_stored_hash_with_old_parameters_is_rehashed_at_sign_in(app, client, token):
    old = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1)
    with services_of(app).database.connection() as conn:
        set_password_hash(conn, 2, old.hash(GOOD))
    assert client.post("/api/login", json={"name": "alice", "password": GOOD}).status_code == 200
    with services_of(app).database.connection() as conn:
        stored = password_hash_of(conn, 2)
    assert stored is not None and not services_of(app).passwords.hasher.check_needs_rehash(stored)
    assert app.test_client().post("/api/login", json={"name": "alice", "password": GOOD}).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"name": "alice"},
        {"password": GOOD},
        {"name": "alice", "password": GOOD, "token": "x"},
        {"name": "alice", "password": GOOD, "remember": True},
        {"name": "alice", "password": "x" * 10_000},
        {"name": "a" * 65, "password": GOOD},
    ],
)
def test_malformed_logins_are_refused_before_any_hash(app, client, token, body):
    before = services_of(app).passwords.hashes
    response = client.post("/api/login", json=body)
    assert response.status_code == 400 and error_code(response) == "invalid_request"
    assert services_of(app).passwords.hashes == before


def test_a_huge_login_body_is_refused_unread(app, client):
    response = client.post("/api/login", data=b'{"name":"a","password":"' + b"x" * (9 * 1024 * 1024) + b'"}')
    assert response.status_code == 413


def test_password_guesses_spend_the_login_budget_per_address_and_per_name(make_app, fake_llm):
    app = make_app(llm_base_url=fake_llm.openai_base_url, rate_limits="login=3/minute")
    new_token(app)
    set_password(app, "alice", GOOD)
    client = app.test_client()
    codes = [
        client.post("/api/login", json={"name": "alice", "password": f"guess {n}xx"}).status_code for n in range(4)
    ]
    assert codes == [401, 401, 401, 429]
    hashes = services_of(app).passwords.hashes
    assert client.post("/api/login", json={"name": "alice", "password": GOOD}).status_code == 429
    assert services_of(app).passwords.hashes == hashes  # refused before hashing

    # the name's failures lock it for every address that guessed wrong itself ...
    guesser = app.test_client()
    guesser.environ_base["REMOTE_ADDR"] = "10.0.0.8"
    assert guesser.post("/api/login", json={"name": "bob", "password": "wrong one"}).status_code == 401
    assert guesser.post("/api/login", json={"name": "alice", "password": GOOD}).status_code == 429
    # ... but the account's owner, from an address that never failed, is not locked out
    owner = app.test_client()
    owner.environ_base["REMOTE_ADDR"] = "10.0.0.9"
    assert owner.post("/api/login", json={"name": "alice", "password": GOOD}).status_code == 200
    # a fresh address that guesses wrong once is then refused for the locked name
    fresh = app.test_client()
    fresh.environ_base["REMOTE_ADDR"] = "10.0.0.10"
    assert fresh.post("/api/login", json={"name": "alice", "password": "guess again"}).status_code == 401
    assert fresh.post("/api/login", json={"name": "alice", "password": GOOD}).status_code == 429
    # another user is not affected
    new_token(app, "bob")
    set_password(app, "bob", GOOD)
    assert owner.post("/api/login", json={"name": "bob", "password": GOOD}).status_code == 200


# disabled users ----------------------------------------------------------------------------------


def test_a_disabled_user_is_refused_everywhere_and_their_sessions_end(app, fake_llm):
    token = new_token(app)
    set_password(app, "alice", GOOD)
    by_password, by_token = app.test_client(), app.test_client()
    assert by_password.post("/api/login", json={"name": "alice", "password": GOOD}).status_code == 200
    assert by_token.post("/api/login", json={"token": token}).status_code == 200
    admin = app.test_client()
    changed = admin.patch("/api/admin/users/2", json={"disabled": True}, headers=admin_auth(app))
    assert changed.status_code == 200 and changed.get_json()["disabled_at"]

    for path in ("/sessions", "/v1/models", "/api/me"):
        refused = admin.get(path, headers=bearer(token))
        assert refused.status_code == 403 and error_code(refused) == "account_disabled", path
    assert user_of(app, token) is None  # /mcp's authentication
    assert by_password.get("/api/me").status_code == 401
    assert by_token.get("/sessions").status_code == 401
    refused = app.test_client().post("/api/login", json={"name": "alice", "password": GOOD})
    assert refused.status_code == 403 and error_code(refused) == "account_disabled"
    wrong = app.test_client().post("/api/login", json={"name": "alice", "password": "wrong password"})
    assert wrong.status_code == 401 and error_code(wrong) == "invalid_credentials"  # no hint to a guesser
    assert app.test_client().post("/api/login", json={"token": token}).status_code == 403

    assert admin.patch("/api/admin/users/2", json={"disabled": False}, headers=admin_auth(app)).status_code == 200
    assert admin.get("/sessions", headers=bearer(token)).status_code == 200
    assert app.test_client().post("/api/login", json={"name": "alice", "password": GOOD}).status_code == 200


# sign-up -----------------------------------------------------------------------------------------


def test_sign_up_is_off_by_default(client):
    assert client.get("/api/auth/options").get_json()["signup"] is False
    refused = client.post("/api/signup", json={"name": "eve", "password": GOOD})
    assert refused.status_code == 403 and error_code(refused) == "signup_disabled"


def test_sign_up_when_on_makes_a_plain_user_and_signs_in(make_app, fake_llm):
    app = make_app(llm_base_url=fake_llm.openai_base_url, signup_enabled=True)
    client = app.test_client()
    assert client.get("/api/auth/options").get_json()["signup"] is True
    made = client.post("/api/signup", json={"name": "eve", "password": GOOD})
    assert made.status_code == 200 and made.get_json()["role"] == "user"
    assert client.get("/api/me").get_json()["name"] == "eve"
    assert client.get("/api/tokens").get_json() == {"tokens": []}
    taken = app.test_client().post("/api/signup", json={"name": "eve", "password": GOOD})
    assert taken.status_code == 409 and error_code(taken) == "name_taken"
    for body in (
        {"name": "frank", "password": "short"},
        {"name": "frank", "password": "é" * 600},  # 600 characters, 1,200 bytes
        {"name": "has space", "password": GOOD},
        {"name": "frank", "password": GOOD, "role": "admin"},
    ):
        response = app.test_client().post("/api/signup", json=body)
        assert response.status_code == 400, body
    assert app.test_client().post("/api/login", json={"name": "eve", "password": GOOD}).status_code == 200


# the user's password and tokens ------------------------------------------------------------------


def test_changing_the_password_checks_the_current_one_and_ends_other_password_sessions(app, token):
    set_password(app, "alice", GOOD)
    mine, elsewhere, with_token = app.test_client(), app.test_client(), app.test_client()
    for client in (mine, elsewhere):
        assert client.post("/api/login", json={"name": "alice", "password": GOOD}).status_code == 200
    with_token.post("/api/login", json={"token": token})

    csrf = mine.post("/api/me/password", json={"current": GOOD, "new": "another secret"})
    assert csrf.status_code == 403 and error_code(csrf) == "csrf_header_missing"
    wrong = mine.post("/api/me/password", json={"current": "nope nope", "new": "another secret"}, headers=CSRF)
    assert wrong.status_code == 401 and error_code(wrong) == "invalid_credentials"
    short = mine.post("/api/me/password", json={"current": GOOD, "new": "short"}, headers=CSRF)
    assert short.status_code == 400
    assert (
        mine.post("/api/me/password", json={"current": GOOD, "new": "another secret"}, headers=CSRF).status_code == 204
    )

    assert mine.get("/api/me").status_code == 200  # the session that changed it stays
    assert elsewhere.get("/api/me").status_code == 401  # other password sign-ins end
    assert with_token.get("/api/me").status_code == 200  # a token's session lives as long as the token
    fresh = app.test_client()
    assert fresh.post("/api/login", json={"name": "alice", "password": GOOD}).status_code == 401
    assert fresh.post("/api/login", json={"name": "alice", "password": "another secret"}).status_code == 200


def test_a_user_without_a_password_sets_one_with_a_token(app, client, token):
    assert client.post("/api/me/password", json={"new": GOOD}, headers=bearer(token)).status_code == 204
    assert app.test_client().post("/api/login", json={"name": "alice", "password": GOOD}).status_code == 200


def test_own_tokens_are_listed_without_secrets_created_once_and_revoked(app, client, token):
    made = client.post("/api/tokens", json={"label": "curl on my laptop"}, headers=bearer(token))
    assert made.status_code == 201
    secret, info = made.get_json()["token"], made.get_json()["info"]
    assert info["label"] == "curl on my laptop"
    assert client.get("/v1/models", headers=bearer(secret)).status_code == 200
    assert client.get("/sessions", headers=bearer(secret)).status_code == 200

    listed = client.get("/api/tokens", headers=bearer(token)).get_json()["tokens"]
    assert [entry["id"] for entry in listed] == [info["id"] - 1, info["id"]]
    assert secret not in str(listed) and "hash" not in str(listed)

    # another user's token id answers 404, as a missing one, and stays
    bob = new_token(app, "bob")
    bob_token_id = client.get("/api/tokens", headers=bearer(bob)).get_json()["tokens"][0]["id"]
    assert client.delete(f"/api/tokens/{bob_token_id}", headers=bearer(token)).status_code == 404
    assert client.delete("/api/tokens/99999999999999999999", headers=bearer(token)).status_code == 404
    assert client.get("/sessions", headers=bearer(bob)).status_code == 200

    assert client.delete(f"/api/tokens/{info['id']}", headers=bearer(token)).status_code == 204
    assert client.get("/v1/models", headers=bearer(secret)).status_code == 401
    assert client.post("/api/tokens", json={"label": "x" * 101}, headers=bearer(token)).status_code == 400
    assert client.post("/api/tokens", headers=bearer(token)).status_code == 201  # no body: no label


def test_cookie_token_writes_need_the_csrf_header(app, client, token):
    set_password(app, "alice", GOOD)
    client.post("/api/login", json={"name": "alice", "password": GOOD})
    assert client.post("/api/tokens", json={}).status_code == 403
    assert client.post("/api/tokens", json={}, headers=CSRF).status_code == 201
    token_id = client.get("/api/tokens").get_json()["tokens"][-1]["id"]
    assert client.delete(f"/api/tokens/{token_id}").status_code == 403


# the admin API -----------------------------------------------------------------------------------

ADMIN_CALLS = [
    ("get", "/api/admin/users", None),
    ("post", "/api/admin/users", {"name": "mallory2", "token": True}),
    ("patch", "/api/admin/users/1", {"disabled": True}),
    ("patch", "/api/admin/users/2", {"role": "admin"}),
    ("get", "/api/admin/users/1/tokens", None),
    ("post", "/api/admin/users/1/tokens", {}),
    ("delete", "/api/admin/users/1/tokens/1", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_CALLS)
def test_a_plain_user_touching_admin_endpoints_is_refused(app, client, token, method, path, body):
    response = getattr(client, method)(path, json=body, headers=bearer(token))
    assert response.status_code == 403 and error_code(response) == "forbidden"
    assert client.get("/api/me", headers=admin_auth(app)).status_code == 200  # the admin is untouched
    assert client.get("/api/me", headers=bearer(token)).get_json()["role"] == "user"


def test_the_admin_creates_changes_and_resets_users_and_their_tokens(app, client):
    admin = admin_auth(app)
    made = client.post("/api/admin/users", json={"name": "carol", "password": GOOD, "token": True}, headers=admin)
    assert made.status_code == 201
    carol, first_token = made.get_json()["user"], made.get_json()["token"]
    assert carol["has_password"] and carol["tokens"] == 1 and carol["role"] == "user"
    assert client.get("/sessions", headers=bearer(first_token)).status_code == 200
    assert client.post("/api/admin/users", json={"name": "carol", "token": True}, headers=admin).status_code == 409
    assert client.post("/api/admin/users", json={"name": "dan"}, headers=admin).status_code == 400
    listed = client.get("/api/admin/users", headers=admin).get_json()["users"]
    assert [user["name"] for user in listed] == ["admin", "carol"] and "password_hash" not in str(listed)

    signed_in = app.test_client()
    assert signed_in.post("/api/login", json={"name": "carol", "password": GOOD}).status_code == 200
    reset = client.patch(f"/api/admin/users/{carol['id']}", json={"password": "a brand new one"}, headers=admin)
    assert reset.status_code == 200
    assert signed_in.get("/api/me").status_code == 401  # the reset ended her password sign-ins
    assert app.test_client().post("/api/login", json={"name": "carol", "password": GOOD}).status_code == 401
    assert (
        app.test_client().post("/api/login", json={"name": "carol", "password": "a brand new one"}).status_code == 200
    )

    promoted = client.patch(f"/api/admin/users/{carol['id']}", json={"role": "instructor"}, headers=admin)
    assert promoted.get_json()["role"] == "instructor"

    tokens_path = f"/api/admin/users/{carol['id']}/tokens"
    second = client.post(tokens_path, json={"label": "from the admin"}, headers=admin).get_json()
    assert [entry["label"] for entry in client.get(tokens_path, headers=admin).get_json()["tokens"]] == [
        None,
        "from the admin",
    ]
    assert client.delete(f"{tokens_path}/{second['info']['id']}", headers=admin).status_code == 204
    assert client.get("/sessions", headers=bearer(second["token"])).status_code == 401
    assert client.delete(f"{tokens_path}/1", headers=admin).status_code == 404  # the admin's own token, not hers
    assert client.get("/api/admin/users/999/tokens", headers=admin).status_code == 404
    assert client.patch("/api/admin/users/999", json={"disabled": True}, headers=admin).status_code == 404


def test_the_last_active_admin_cannot_be_disabled_or_demoted(app, client):
    admin = admin_auth(app)
    for change in ({"disabled": True}, {"role": "user"}):
        refused = client.patch("/api/admin/users/1", json=change, headers=admin)
        assert refused.status_code == 409 and error_code(refused) == "last_admin"
    second = client.post("/api/admin/users", json={"name": "root2", "role": "admin", "token": True}, headers=admin)
    second_id = second.get_json()["user"]["id"]
    assert client.patch(f"/api/admin/users/{second_id}", json={"disabled": True}, headers=admin).status_code == 200
    assert (
        client.patch("/api/admin/users/1", json={"role": "user"}, headers=admin).status_code == 409
    )  # root2 is disabled
    assert client.patch(f"/api/admin/users/{second_id}", json={"disabled": False}, headers=admin).status_code == 200
    assert client.patch("/api/admin/users/1", json={"role": "user"}, headers=admin).status_code == 200
    assert client.get("/api/admin/users", headers=admin).status_code == 403  # no longer an admin


# the hashing gate --------------------------------------------------------------------------------


def test_a_flood_never_waits_for_a_place_and_a_clean_caller_keeps_one_of_its_own():
    passwords = Passwords(PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1), slots=1, clean_places=1)
    stored = passwords.hash(GOOD, key="setup")
    results: list[str] = []
    start = threading.Barrier(25)

    def guess(key: str) -> None:
        start.wait()
        try:
            results.append(str(passwords.verify(stored, "wrong guess", key=key, clean=False)[0]))
        except Busy:
            results.append("busy")  # at once: no thread waits for a place

    flood = [threading.Thread(target=guess, args=(f"flood {n}",)) for n in range(24)]
    for thread in flood:
        thread.start()
    start.wait()
    owner = [passwords.verify(stored, GOOD, key="the owner", clean=True)[0] for _ in range(5)]
    for thread in flood:
        thread.join()
    assert owner == [True] * 5  # the kept place is the owner's whenever the shared one is taken
    assert len(results) == 24 and set(results) <= {"False", "busy"}
    assert passwords.peak_running <= 2
    assert passwords.gate.held() == {} and passwords.running() == 0
