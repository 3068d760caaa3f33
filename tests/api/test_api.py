"""SPEC sections 3 and 4 at the HTTP level: auth, isolation, sessions, /chat validation, uploads.

Every test talks to a real app through Flask's test client; the provider is the product's own
OpenAI-compatible client pointed at the loopback `FakeLLMServer`.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from api.services import services_of
from api.turns import TurnAnswer
from testing.fake_llm import FakeLLMServer, tiny_png
from tests.conftest import new_token

ISO_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}(Z|[+-]\d{2}:\d{2})$")
MESSAGE_KEYS = {"id", "session_id", "role", "content", "created_at", "parent_id"}


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """The response is `{"error": {"code", "message"[, "details"]}}` with this status and code."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert set(body) == {"error"}
    error = body["error"]
    assert {"code", "message"} <= set(error) <= {"code", "message", "details"}
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code
    return error


def chat(client: FlaskClient, auth: dict[str, str], message: str, **extra: Any) -> Any:
    return client.post("/chat", json={"message": message, **extra}, headers=auth)


def new_session(client: FlaskClient, auth: dict[str, str], name: str | None = None) -> dict[str, Any]:
    response = client.post("/sessions", json={} if name is None else {"name": name}, headers=auth)
    assert response.status_code == 201
    return response.get_json()


def messages(client: FlaskClient, auth: dict[str, str], session_id: str, query: str = "") -> Any:
    return client.get(f"/sessions/{session_id}/messages{query}", headers=auth)


@pytest.fixture(scope="module")
def shared_llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def fake_llm(shared_llm: FakeLLMServer) -> FakeLLMServer:
    """One loopback server for the module, emptied before each test."""
    shared_llm.reset()
    return shared_llm


@pytest.fixture
def other(app: Flask) -> dict[str, str]:
    """A second user, Bob."""
    return {"Authorization": f"Bearer {new_token(app, 'bob')}"}


# Authentication (SPEC 3) --------------------------------------------------------------------

PROTECTED = [
    ("POST", "/chat"),
    ("GET", "/sessions"),
    ("POST", "/sessions"),
    ("GET", "/sessions/abc"),
    ("PATCH", "/sessions/abc"),
    ("DELETE", "/sessions/abc"),
    ("GET", "/sessions/abc/messages"),
    ("GET", "/files/uploads/1/x.png"),
]
BAD_HEADERS = {
    "none": {},
    "wrong token": {"Authorization": "Bearer not-a-real-token"},
    "basic scheme": {"Authorization": "Basic YWxpY2U6c2VjcmV0"},
    "empty bearer": {"Authorization": "Bearer "},
    "bare scheme": {"Authorization": "Bearer"},
}


@pytest.mark.parametrize("method,path", PROTECTED)
def test_protected_routes_answer_401(client, token, method, path):
    for label, headers in BAD_HEADERS.items():
        response = client.open(path, method=method, json={"message": "hi", "name": "x"}, headers=headers)
        assert response.status_code == 401, label
        assert_error(response, 401, "unauthorized")


def test_basic_scheme_carrying_a_valid_token_is_refused(client, token):
    response = client.get("/sessions", headers={"Authorization": f"Basic {token}"})
    assert_error(response, 401, "unauthorized")


def test_bearer_scheme_is_case_insensitive(client, token):
    assert client.get("/sessions", headers={"Authorization": f"bearer {token}"}).status_code == 200


def test_refused_chat_stores_nothing(app, client, auth, fake_llm):
    client.post("/chat", json={"message": "hi"})
    assert fake_llm.requests == []
    assert client.get("/sessions", headers=auth).get_json() == {"sessions": []}


def test_health_is_public(client):
    assert client.get("/health").status_code == 200


# Isolation: another user's ids answer exactly like missing ones ------------------------------


@pytest.fixture
def alice_session(client, auth, fake_llm) -> dict[str, Any]:
    fake_llm.queue("hello Alice")
    body = chat(client, auth, "alice's secret").get_json()
    return {"id": body["session_id"], "messages": body["messages"]}


def _session_routes(session_id: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [
        ("GET", f"/sessions/{session_id}", None),
        ("PATCH", f"/sessions/{session_id}", {"name": "stolen"}),
        ("DELETE", f"/sessions/{session_id}", None),
        ("GET", f"/sessions/{session_id}/messages", None),
        ("POST", "/chat", {"message": "let me in", "session_id": session_id}),
    ]


def test_other_users_session_answers_like_a_missing_one(client, auth, other, alice_session, fake_llm):
    calls_before = len(fake_llm.requests)
    for (method, path, body), (_, missing_path, missing_body) in zip(
        _session_routes(alice_session["id"]), _session_routes("0" * 32), strict=True
    ):
        stolen = client.open(path, method=method, json=body, headers=other)
        missing = client.open(missing_path, method=method, json=missing_body, headers=other)
        assert_error(stolen, 404, "not_found")
        assert stolen.get_json() == missing.get_json(), (method, path)
    assert len(fake_llm.requests) == calls_before
    # Nothing of Alice's changed.
    own = client.get(f"/sessions/{alice_session['id']}", headers=auth).get_json()
    assert own["name"] == "alice's secret"
    assert messages(client, auth, alice_session["id"]).get_json()["messages"] == alice_session["messages"]


def test_session_list_is_per_user(client, auth, other, alice_session):
    assert client.get("/sessions", headers=other).get_json() == {"sessions": []}
    bob = new_session(client, other, "bob's")
    assert [s["id"] for s in client.get("/sessions", headers=auth).get_json()["sessions"]] == [alice_session["id"]]
    assert [s["id"] for s in client.get("/sessions", headers=other).get_json()["sessions"]] == [bob["id"]]


def test_other_users_file_answers_404(client, auth, other, fake_llm):
    data = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()
    fake_llm.queue("a red square")
    body = chat(client, auth, "what is this?", images=[data]).get_json()
    path = body["messages"][0]["meta"]["images"][0]["path"]
    assert client.get(f"/files/{path}", headers=auth).data == tiny_png()
    stolen = client.get(f"/files/{path}", headers=other)
    missing = client.get(f"/files/{path.rsplit('/', 1)[0]}/missing.png", headers=other)
    assert_error(stolen, 404, "not_found")
    assert stolen.get_json() == missing.get_json()


# Sessions CRUD --------------------------------------------------------------------------------


def test_create_session_with_and_without_name(client, auth):
    named = new_session(client, auth, "Trip planning")
    assert named["name"] == "Trip planning"
    assert set(named) == {"id", "name", "created_at", "updated_at", "pinned_at"}
    assert ISO_MS.match(named["created_at"])
    assert new_session(client, auth)["name"] == "New chat"


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"data": ""}, {"data": "", "content_type": "application/json"}],
    ids=["no body", "empty body", "empty json body"],
)
def test_create_session_without_a_body(client, auth, kwargs):
    response = client.post("/sessions", headers=auth, **kwargs)
    assert response.status_code == 201
    assert response.get_json()["name"] == "New chat"


@pytest.mark.parametrize(
    "body,code",
    [
        ({"name": ""}, "invalid_request"),
        ({"name": " \t "}, "invalid_request"),
        ({"name": "x" * 201}, "invalid_request"),
        ({"name": 5}, "invalid_request"),
        ({"title": "x"}, "invalid_request"),
        ("[1, 2]", "invalid_json"),
        ("{not json", "invalid_json"),
    ],
)
def test_create_session_rejects_bad_bodies(client, auth, body, code):
    if isinstance(body, str):
        response = client.post("/sessions", data=body, content_type="application/json", headers=auth)
    else:
        response = client.post("/sessions", json=body, headers=auth)
    assert_error(response, 400, code)
    assert client.get("/sessions", headers=auth).get_json() == {"sessions": []}


def test_sessions_list_by_recent_activity(client, auth, fake_llm):
    first = new_session(client, auth, "first")
    second = new_session(client, auth, "second")
    third = new_session(client, auth, "third")

    def order() -> list[str]:
        return [s["name"] for s in client.get("/sessions", headers=auth).get_json()["sessions"]]

    assert order() == ["third", "second", "first"]
    chat(client, auth, "hello", session_id=first["id"])
    assert order() == ["first", "third", "second"]
    client.patch(f"/sessions/{second['id']}", json={"name": "second"}, headers=auth)
    assert order() == ["second", "first", "third"]
    assert third["id"] in {s["id"] for s in client.get("/sessions", headers=auth).get_json()["sessions"]}


def test_show_session(client, auth):
    created = new_session(client, auth, "Shown")
    response = client.get(f"/sessions/{created['id']}", headers=auth)
    assert response.status_code == 200
    assert response.get_json() == {**created, "active_turn": None, "model": None}


def test_rename_session(client, auth):
    created = new_session(client, auth, "Old")
    response = client.patch(f"/sessions/{created['id']}", json={"name": "New name"}, headers=auth)
    assert response.status_code == 200
    renamed = response.get_json()
    assert renamed["id"] == created["id"] and renamed["name"] == "New name"
    assert renamed["updated_at"] >= created["updated_at"]
    assert client.get(f"/sessions/{created['id']}", headers=auth).get_json()["name"] == "New name"


@pytest.mark.parametrize(
    "body,code",
    [
        ({}, "invalid_request"),
        ({"name": ""}, "invalid_request"),
        ({"name": "  \n "}, "invalid_request"),
        ({"name": "x" * 201}, "invalid_request"),
        ({"name": None}, "invalid_request"),
        ({"name": "ok", "extra": 1}, "invalid_request"),
        (None, "invalid_json"),
    ],
    ids=["missing", "empty", "whitespace", "too long", "null", "extra field", "no body"],
)
def test_rename_validation(client, auth, body, code):
    created = new_session(client, auth, "Keep")
    response = client.patch(f"/sessions/{created['id']}", headers=auth, **({} if body is None else {"json": body}))
    error = assert_error(response, 400, code)
    if code == "invalid_request":
        assert isinstance(error["details"], list) and error["details"]
    assert client.get(f"/sessions/{created['id']}", headers=auth).get_json()["name"] == "Keep"


def test_rename_accepts_200_chars_and_trims_spaces(client, auth):
    created = new_session(client, auth)
    response = client.patch(f"/sessions/{created['id']}", json={"name": "y" * 200}, headers=auth)
    assert response.status_code == 200
    response = client.patch(f"/sessions/{created['id']}", json={"name": "  Trimmed \n"}, headers=auth)
    assert response.get_json()["name"] == "Trimmed"


def test_delete_session(client, auth, fake_llm):
    session_id = chat(client, auth, "to be deleted").get_json()["session_id"]
    response = client.delete(f"/sessions/{session_id}", headers=auth)
    assert response.status_code == 204
    assert response.data == b""
    assert_error(client.get(f"/sessions/{session_id}", headers=auth), 404, "not_found")
    assert_error(messages(client, auth, session_id), 404, "not_found")
    assert_error(client.delete(f"/sessions/{session_id}", headers=auth), 404, "not_found")
    assert_error(chat(client, auth, "again", session_id=session_id), 404, "not_found")
    assert client.get("/sessions", headers=auth).get_json() == {"sessions": []}


@pytest.fixture
def five_messages(app, client, auth) -> tuple[str, list[int]]:
    """A session holding five stored messages (ids ascending), written through storage."""
    from storage.messages import add_message

    session = new_session(client, auth, "paged")
    with services_of(app).database.connection() as conn:
        user_id = conn.execute("SELECT id FROM users WHERE name = 'alice'").fetchone()[0]
        ids = [
            add_message(conn, session_id=session["id"], user_id=user_id, role=role, content=f"m{n}").id
            for n, role in enumerate(["user", "assistant"] * 2 + ["user"])
        ]
    return session["id"], ids


def test_messages_default_page_is_everything_in_id_order(client, auth, five_messages):
    session_id, ids = five_messages
    body = messages(client, auth, session_id).get_json()
    assert set(body) == {"messages", "has_more"}
    assert [m["id"] for m in body["messages"]] == ids
    assert [m["content"] for m in body["messages"]] == ["m0", "m1", "m2", "m3", "m4"]
    assert body["has_more"] is False


def test_messages_paging_with_limit_and_before(client, auth, five_messages):
    session_id, ids = five_messages
    page = messages(client, auth, session_id, "?limit=2").get_json()
    assert [m["id"] for m in page["messages"]] == ids[3:]
    assert page["has_more"] is True
    page = messages(client, auth, session_id, f"?limit=2&before={ids[3]}").get_json()
    assert [m["id"] for m in page["messages"]] == ids[1:3]
    assert page["has_more"] is True
    page = messages(client, auth, session_id, f"?limit=2&before={ids[1]}").get_json()
    assert [m["id"] for m in page["messages"]] == ids[:1]
    assert page["has_more"] is False


def test_messages_has_more_is_false_when_the_page_is_exactly_full(client, auth, five_messages):
    session_id, ids = five_messages
    page = messages(client, auth, session_id, "?limit=5").get_json()
    assert [m["id"] for m in page["messages"]] == ids
    assert page["has_more"] is False
    page = messages(client, auth, session_id, f"?limit=2&before={ids[2]}").get_json()
    assert [m["id"] for m in page["messages"]] == ids[:2]
    assert page["has_more"] is False


def test_messages_of_an_empty_session(client, auth):
    session_id = new_session(client, auth)["id"]
    assert messages(client, auth, session_id).get_json() == {"messages": [], "has_more": False}


@pytest.mark.parametrize(
    "query", ["?limit=0", "?limit=201", "?limit=abc", "?limit=-1", "?limit=1.5", "?before=0", "?before=xyz"]
)
def test_messages_invalid_paging_arguments(client, auth, query):
    session_id = new_session(client, auth)["id"]
    assert_error(messages(client, auth, session_id, query), 400, "invalid_request")


def test_messages_limit_bounds_are_inclusive(client, auth):
    session_id = new_session(client, auth)["id"]
    assert messages(client, auth, session_id, "?limit=1").status_code == 200
    assert messages(client, auth, session_id, "?limit=200").status_code == 200


# POST /chat validation ----------------------------------------------------------------------

CHAT_BAD_BODIES = {
    "not json": ("hello there", "text/plain", "invalid_json"),
    "malformed json": ('{"message": ', "application/json", "invalid_json"),
    "json array": ('["hello"]', "application/json", "invalid_json"),
    "json string": ('"hello"', "application/json", "invalid_json"),
    "missing message": ("{}", "application/json", "invalid_request"),
    "message number": ('{"message": 5}', "application/json", "invalid_request"),
    "message list": ('{"message": ["a"]}', "application/json", "invalid_request"),
    "message null": ('{"message": null}', "application/json", "invalid_request"),
    "empty message": ('{"message": ""}', "application/json", "empty_message"),
    "whitespace message": ('{"message": " \\n\\t "}', "application/json", "empty_message"),
    "unknown field": ('{"message": "hi", "model": "gpt"}', "application/json", "invalid_request"),
    "session_id number": ('{"message": "hi", "session_id": 5}', "application/json", "invalid_request"),
    "images not list": ('{"message": "hi", "images": "data:x"}', "application/json", "invalid_request"),
}


@pytest.mark.parametrize("data,content_type,code", CHAT_BAD_BODIES.values(), ids=CHAT_BAD_BODIES.keys())
def test_chat_rejects_bad_bodies(client, auth, fake_llm, data, content_type, code):
    response = client.post("/chat", data=data, content_type=content_type, headers=auth)
    assert_error(response, 400, code)
    assert fake_llm.requests == []
    assert client.get("/sessions", headers=auth).get_json() == {"sessions": []}


def test_chat_validation_errors_name_the_field(client, auth):
    error = assert_error(client.post("/chat", json={"message": "hi", "model": "x"}, headers=auth), 400)
    assert [d["field"] for d in error["details"]] == ["model"]
    error = assert_error(client.post("/chat", json={}, headers=auth), 400)
    assert [d["field"] for d in error["details"]] == ["message"]


def test_chat_message_length_limit(client, auth, fake_llm):
    assert chat(client, auth, "x" * 32_000).status_code == 200
    error = assert_error(chat(client, auth, "x" * 32_001), 400, "invalid_request")
    assert error["details"][0]["field"] == "message"
    assert len(fake_llm.requests) == 1


def test_chat_unknown_session_is_404(client, auth, fake_llm):
    assert_error(chat(client, auth, "hi", session_id="does-not-exist"), 404, "not_found")
    assert fake_llm.requests == []


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_chat_wrong_method_is_405_json(client, auth, method):
    response = client.open("/chat", method=method, headers=auth)
    assert_error(response, 405, "method_not_allowed")
    assert "POST" in response.headers.get("Allow", "")


def test_unknown_route_is_404_json(client, auth):
    assert_error(client.get("/no/such/route", headers=auth), 404, "not_found")
    assert_error(client.get("/no/such/route"), 404, "not_found")


def test_chat_without_session_creates_one_named_after_the_message(client, auth, fake_llm):
    fake_llm.queue("Sure.")
    body = chat(client, auth, "  Plan a   trip\nto Lisbon  ").get_json()
    session = client.get(f"/sessions/{body['session_id']}", headers=auth).get_json()
    assert session["name"] == "Plan a trip to Lisbon"
    long = chat(client, auth, "word " * 40).get_json()
    name = client.get(f"/sessions/{long['session_id']}", headers=auth).get_json()["name"]
    assert 0 < len(name) <= 60 and name == ("word " * 40)[: len(name)]


def test_chat_in_an_existing_session(client, auth, fake_llm):
    session_id = new_session(client, auth, "mine")["id"]
    fake_llm.queue("one", "two")
    first = chat(client, auth, "first", session_id=session_id).get_json()
    second = chat(client, auth, "second", session_id=session_id).get_json()
    assert first["session_id"] == second["session_id"] == session_id
    assert [m["content"] for m in messages(client, auth, session_id).get_json()["messages"]] == [
        "first",
        "one",
        "second",
        "two",
    ]
    assert len(client.get("/sessions", headers=auth).get_json()["sessions"]) == 1


@pytest.mark.parametrize(
    "replies",
    [("Sure.",), ("/remember I like tea", "Noted."), ("/no_such_tool now", "Sorry.")],
    ids=["plain", "tool", "failed-tool"],
)
def test_the_chat_answer_is_exactly_the_turn_answer_model(client, auth, fake_llm, replies):
    """`turn_payload` builds the answer as a plain dict: it must be what the model dumps."""
    fake_llm.queue(*replies)
    body = chat(client, auth, "hello there").get_json()
    assert TurnAnswer.model_validate(body).model_dump(mode="json", exclude_unset=True) == body
    assert [message["role"] for message in body["messages"]][0] == "user" and body["stopped"] is False
    assert (body["tool"] is None) == (len(replies) == 1)


# Images: multipart and data URLs ---------------------------------------------------------------


def test_multipart_chat_with_an_image(app, client, auth, fake_llm):
    session_id = new_session(client, auth)["id"]
    fake_llm.queue("A red square.")
    png = tiny_png()
    response = client.post(
        "/chat",
        data={"message": "what is this?", "session_id": session_id, "images[]": (io.BytesIO(png), "photo.png")},
        content_type="multipart/form-data",
        headers=auth,
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    assert body["session_id"] == session_id
    assert body["reply"] == "A red square."
    user = body["messages"][0]
    assert user["role"] == "user" and user["content"] == "what is this?"
    [image] = user["meta"]["images"]
    assert image["mime"] == "image/png"
    assert (image["width"], image["height"], image["bytes"]) == (2, 2, len(png))
    assert image["path"].startswith("uploads/")
    assert not image["path"].endswith("photo.png")
    assert client.get(f"/files/{image['path']}", headers=auth).data == png
    # The stored row carries the same meta.
    assert messages(client, auth, session_id).get_json()["messages"][0]["meta"] == user["meta"]
    # The provider received the image.
    sent = str(fake_llm.requests[-1])
    assert base64.b64encode(png).decode() in sent


def test_multipart_chat_without_session_creates_one(client, auth, fake_llm):
    response = client.post(
        "/chat", data={"message": "plain multipart"}, content_type="multipart/form-data", headers=auth
    )
    assert response.status_code == 200
    assert client.get(f"/sessions/{response.get_json()['session_id']}", headers=auth).get_json()["name"] == (
        "plain multipart"
    )


def test_multipart_without_message_is_rejected(client, auth, fake_llm):
    response = client.post(
        "/chat",
        data={"images[]": (io.BytesIO(tiny_png()), "a.png")},
        content_type="multipart/form-data",
        headers=auth,
    )
    assert_error(response, 400, "empty_message")


def test_non_image_upload_named_png_is_rejected(client, auth, fake_llm, app):
    response = client.post(
        "/chat",
        data={"message": "look", "images[]": (io.BytesIO(b"#!/bin/sh\necho pwned\n"), "x.png")},
        content_type="multipart/form-data",
        headers=auth,
    )
    assert_error(response, 400, "invalid_image")
    assert fake_llm.requests == []
    # A rejected request leaves nothing behind: no session, no file.
    assert client.get("/sessions", headers=auth).get_json() == {"sessions": []}
    uploads = services_of(app).settings.uploads_dir
    assert not uploads.exists() or not any(p.is_file() for p in uploads.rglob("*"))


def test_too_many_images_are_rejected(client, auth, fake_llm):
    files = [(io.BytesIO(tiny_png()), f"{n}.png") for n in range(5)]
    response = client.post(
        "/chat", data={"message": "many", "images[]": files}, content_type="multipart/form-data", headers=auth
    )
    assert_error(response, 400, "invalid_request")
    assert fake_llm.requests == []


def test_json_chat_with_a_data_url_image(client, auth, fake_llm):
    data = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()
    body = chat(client, auth, "see", images=[data]).get_json()
    assert body["messages"][0]["meta"]["images"][0]["mime"] == "image/png"


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png,not-base64-at-all",
        "data:image/png;base64,@@@not base64@@@",
        "data:image/png;base64," + base64.b64encode(b"plain text, not an image").decode(),
        "https://example.com/cat.png",
        "",
    ],
    ids=["no base64 marker", "bad base64", "not an image", "http url", "empty"],
)
def test_bad_data_urls_are_rejected(client, auth, fake_llm, url):
    assert_error(chat(client, auth, "see", images=[url]), 400, "invalid_image")
    assert fake_llm.requests == []
    assert client.get("/sessions", headers=auth).get_json() == {"sessions": []}


# /health --------------------------------------------------------------------------------------


def test_health(client, app):
    response = client.get("/health")
    assert response.status_code == 200
    body = response.get_json()
    assert body["status"] == "ok"
    assert body["database"]["ok"] is True
    assert body["provider"]["name"] == "openai"
    assert body["provider"]["model"] == "test-model"
    assert "judge" in body


def test_health_for_the_scripted_provider(make_app, scripted):
    app = make_app(llm_provider="scripted", llm_base_url=None, scripted_replies=scripted(["hi"]))
    body = app.test_client().get("/health").get_json()
    assert body["status"] == "ok"
    assert body["provider"]["name"] == "scripted"


# Answer contract (SPEC 4) ---------------------------------------------------------------------


def test_plain_turn_answer_shape(client, auth, fake_llm):
    fake_llm.queue("Hello!")
    response = chat(client, auth, "hi")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert set(body) == {"turn_id", "session_id", "reply", "messages", "tool", "stopped"}
    assert body["reply"] == "Hello!"
    assert body["tool"] is None
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    user, answer = body["messages"]
    assert set(user) == MESSAGE_KEYS  # no `meta` key when there is none
    assert set(answer) == {*MESSAGE_KEYS, "meta"}  # an answer names the model that wrote it
    assert answer["meta"] == {"answered_by": {"provider": "openai", "model": "test-model"}}
    for message in body["messages"]:
        assert isinstance(message["id"], int)
        assert message["session_id"] == body["session_id"]
        assert ISO_MS.match(message["created_at"])
    assert body["messages"][0]["id"] < body["messages"][1]["id"]
    assert messages(client, auth, body["session_id"]).get_json()["messages"] == body["messages"]


def test_tool_turn_answer_shape(client, auth, fake_llm):
    fake_llm.queue("/remember likes tea", "Noted.")
    body = chat(client, auth, "I like tea").get_json()
    assert set(body) == {"turn_id", "session_id", "reply", "messages", "tool", "stopped"}
    assert body["tool"]["name"] == "remember" and body["tool"]["ok"] is True
    assert set(body["tool"]) <= {"name", "ok", "code"}
    for message in body["messages"]:
        assert MESSAGE_KEYS <= set(message) <= MESSAGE_KEYS | {"meta"}
        if "meta" in message:
            assert isinstance(message["meta"], dict)


# headers every answer carries -------------------------------------------------------------------


def test_images_are_private_to_caches(client, auth, fake_llm):
    data = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()
    fake_llm.queue("a red square")
    path = chat(client, auth, "what is this?", images=[data]).get_json()["messages"][0]["meta"]["images"][0]["path"]
    served = client.get(f"/files/{path}", headers=auth)
    assert served.status_code == 200
    cache = served.headers["Cache-Control"]
    assert "private" in cache and "public" not in cache
    assert served.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    "method,path,status",
    [
        ("GET", "/health", 200),
        ("GET", "/sessions", 200),
        ("GET", "/sessions/missing", 404),
        ("GET", "/no/such/route", 404),
        ("POST", "/chat", 400),
        ("GET", "/", 200),
    ],
)
def test_every_answer_says_nosniff(client, auth, method, path, status):
    response = client.open(path, method=method, headers=auth, data="x")
    assert response.status_code == status
    assert response.headers["X-Content-Type-Options"] == "nosniff"


# hostile bodies on every route (issue 11, class 7) --------------------------------------------

HOSTILE_BODIES = {
    "deep arrays": "[" * 5_000 + "]" * 5_000,
    "deep objects": '{"a":' * 5_000 + "1" + "}" * 5_000,
    "lone surrogate": '{"message": "hi \\ud800", "name": "\\udc00", "language": "python", '
    '"files": {"main.py": "print(1) # \\ud800"}, "fields": {"location": "\\ud800"}}',
    "many values": "[" + ",".join(["0"] * 30_000) + "]",
}


def _concrete_paths(app: Flask, session_id: str) -> Iterator[tuple[str, str]]:
    """(method, path) for every route of the app, with real ids where the route takes one."""
    tool_names = sorted(tool.name for tool in services_of(app).turns.registry)
    for rule in app.url_map.iter_rules():
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            names = tool_names if "name" in rule.arguments and rule.rule.startswith("/tools") else ["x"]
            for name in names:
                path = rule.rule
                for argument in rule.arguments:
                    value = session_id if "session" in argument or argument == "id" else name
                    path = re.sub(rf"<(?:[a-z]+:)?{argument}>", value, path)
                yield method, path


@pytest.mark.parametrize("kind", list(HOSTILE_BODIES))
def test_no_route_answers_500_to_a_hostile_body(app, client, auth, kind):
    """Every route of `app.url_map` (every tool for `/tools/<name>`), with a body nested 5,000
    levels deep, a lone surrogate, or 30,000 values: a clear 4xx, never a 500."""
    session_id = new_session(client, auth)["id"]
    seen = 0
    for method, path in _concrete_paths(app, session_id):
        response = client.open(
            f"{path}?q=%ED%A0%80",
            method=method,
            data=HOSTILE_BODIES[kind],
            headers={**auth, "Content-Type": "application/json"},
        )
        seen += 1
        assert response.status_code < 500, f"{method} {path}: {response.get_data(as_text=True)[:300]}"
        if response.status_code >= 400 and response.mimetype == "application/json":
            if path.startswith("/v1/"):  # the OpenAI-compatible API answers OpenAI's error shape (SPEC 11)
                error = response.get_json()["error"]
                assert {"message", "type", "code"} <= set(error) and error["message"] and error["code"]
            else:
                assert_error(response, response.status_code)
    assert seen > 40


@pytest.mark.parametrize("kind", list(HOSTILE_BODIES))
def test_every_json_endpoint_says_what_is_wrong_with_the_body(client, auth, kind):
    from testing.attacks.input import BODY_ENDPOINTS

    for method, path in BODY_ENDPOINTS:
        response = client.open(
            path, method=method, data=HOSTILE_BODIES[kind], headers={**auth, "Content-Type": "application/json"}
        )
        code = "INVALID_TOOL_RESULT" if path == "/api/ai/tool-result" else "invalid_json"
        error = assert_error(response, 400, code)
        assert any(word in error["message"] for word in ("deeper", "surrogate", "values")), error


def test_form_fields_never_hold_a_surrogate(client, auth, fake_llm):
    """Multipart text is decoded by Werkzeug with replacement: the UTF-8 form of a surrogate
    (ED A0 80, invalid UTF-8) cannot bring one in that way."""
    fake_llm.queue("ok")
    body = b'--b\r\nContent-Disposition: form-data; name="message"\r\n\r\nhi \xed\xa0\x80\r\n--b--\r\n'
    response = client.post("/chat", data=body, headers={**auth, "Content-Type": "multipart/form-data; boundary=b"})
    assert response.status_code == 200, response.get_data(as_text=True)
    content = response.get_json()["messages"][0]["content"]
    assert content.startswith("hi ") and not any(0xD800 <= ord(char) <= 0xDFFF for char in content)


def test_only_chat_takes_large_bodies(client, auth, fake_llm):
    """A body is read whole before it is parsed: past 8 MiB only `/chat` (images) reads it."""
    from api.bodies import MAX_BODY_BYTES

    big = '{"name": "' + "a" * MAX_BODY_BYTES + '"}'
    for method, path in [
        ("POST", "/sessions"),
        ("PATCH", "/api/profile"),
        ("POST", "/tools/remember"),
        ("POST", "/api/ai/tool-result"),
        ("POST", "/run"),
    ]:
        response = client.open(path, method=method, data=big, headers={**auth, "Content-Type": "application/json"})
        assert_error(response, 413, "payload_too_large")
    chat_body = '{"message": "' + "a" * MAX_BODY_BYTES + '"}'
    response = client.post("/chat", data=chat_body, headers={**auth, "Content-Type": "application/json"})
    assert_error(response, 400, "invalid_request")  # read and validated: the message is too long
