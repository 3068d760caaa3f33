"""The web UI's cookie login: token -> HttpOnly SameSite cookie, CSRF header on writes."""

from __future__ import annotations


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
