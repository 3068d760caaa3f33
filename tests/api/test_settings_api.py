"""A user's settings (SPEC 17) over real HTTP, on SQLite and PostgreSQL: `GET/PATCH /api/settings`,
`GET /api/models`, a session's model (`PATCH /sessions/<id> {"model"}`), and what each changes in
that user's turns (the provider is the product's OpenAI client talking to `FakeLLMServer`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from storage.user_settings import MAX_PROMPT_CHARS
from testing.fake_llm import FakeLLMServer
from tests.conftest import new_token

FALLBACK = "openai:second-model"


@pytest.fixture
def base_settings(base_settings: dict[str, Any], backend_settings: dict[str, str]) -> dict[str, Any]:
    """Every test here runs on both backends: SQLite and PostgreSQL (tests/pg_support.py)."""
    return {**base_settings, **backend_settings}


@pytest.fixture
def app(make_app: Callable[..., Flask], fake_llm: FakeLLMServer) -> Flask:
    return make_app(llm_base_url=fake_llm.openai_base_url, llm_fallbacks=FALLBACK)


def settings(client: FlaskClient, auth: dict[str, str]) -> dict[str, Any]:
    response = client.get("/api/settings", headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def patch(client: FlaskClient, auth: dict[str, str], body: Any) -> Any:
    return client.patch("/api/settings", json=body, headers=auth)


def command_row(body: dict[str, Any], name: str) -> dict[str, Any]:
    return next(row for row in body["commands"] if row["command"] == name)


def system_messages(fake_llm: FakeLLMServer) -> list[str]:
    return [m["content"] for request in fake_llm.requests for m in request["messages"] if m["role"] == "system"]


def new_chat(client: FlaskClient, auth: dict[str, str]) -> str:
    return client.post("/sessions", json={}, headers=auth).get_json()["id"]


def chat(client: FlaskClient, auth: dict[str, str], message: str, session_id: str | None = None) -> Any:
    body = {"message": message, **({"session_id": session_id} if session_id else {})}
    response = client.post("/chat", json=body, headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


# GET/PATCH /api/settings -------------------------------------------------------------------


def test_defaults_then_a_patch_keeps_what_it_does_not_name(client, auth, app):
    body = settings(client, auth)
    assert body["theme"] == "system" and body["system_prompt"] == ""
    assert body["approval"] == {"every_command": False, "commands": []}
    assert body["system_prompt_max"] == MAX_PROMPT_CHARS
    assert patch(client, auth, {"theme": "dark"}).status_code == 200
    changed = patch(client, auth, {"system_prompt": "  Answer in French.  "}).get_json()
    assert changed["theme"] == "dark" and changed["system_prompt"] == "Answer in French."
    assert settings(client, auth)["theme"] == "dark"  # stored, not only answered
    other = {"Authorization": f"Bearer {new_token(app, 'bob')}"}
    assert settings(client, other)["theme"] == "system"  # one user's settings only


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"theme": "sepia"}, "invalid_request"),
        ({"system_prompt": "x" * (MAX_PROMPT_CHARS + 1)}, "invalid_request"),
        ({"colour": "red"}, "invalid_request"),  # extra=forbid
        ({"approval": {"every_command": 0}}, "invalid_request"),  # strict: 0 is not false
        ({"approval": {"commands": ["write_file"], "never": ["edit_file"]}}, "invalid_request"),
        ({"approval": {"commands": ["no_such_command"]}}, "unknown_command"),
        ({"approval": {"commands": ["ask_choice"]}}, "unknown_command"),  # a widget is a question already
    ],
)
def test_bad_settings_answer_400_and_change_nothing(client, auth, body, code):
    response = patch(client, auth, body)
    assert response.status_code == 400 and response.get_json()["error"]["code"] == code
    assert settings(client, auth)["theme"] == "system"


def test_the_catalog_says_what_asks_and_what_the_user_may_change(client, auth):
    body = settings(client, auth)
    names = {row["command"] for row in body["commands"]}
    assert {"remember", "write_file", "memory_sql"} <= names and "ask_choice" not in names
    assert command_row(body, "write_file") | {"description": ""} == {
        "command": "write_file",
        "description": "",
        "operator": "always",
        "user": False,
        "asks": "always",
        "locked": True,
        "reason": "the operator makes this command ask (TOOL_APPROVAL)",
    }
    assert command_row(body, "memory_sql")["operator"] == "sometimes" and not command_row(body, "memory_sql")["locked"]
    remember = command_row(body, "remember")
    assert (remember["asks"], remember["locked"]) == ("never", False)
    after = patch(client, auth, {"approval": {"commands": ["remember"]}}).get_json()
    assert command_row(after, "remember") | {"description": ""} == {
        "command": "remember",
        "description": "",
        "operator": "never",
        "user": True,
        "asks": "always",
        "locked": False,
        "reason": None,
    }
    everything = patch(client, auth, {"approval": {"every_command": True}}).get_json()
    assert all(row["asks"] == "always" for row in everything["commands"])


# the model of a session ----------------------------------------------------------------------


def test_the_models_are_the_configured_chain(client, auth):
    response = client.get("/api/models", headers=auth)
    assert response.status_code == 200
    models = response.get_json()["models"]
    assert [(m["id"], m["default"]) for m in models] == [("openai:test-model", True), (FALLBACK, False)]
    assert models[0]["label"] == "test-model (openai)" and models[0]["health"] in {"ok", "down", "unknown"}


def test_a_session_chooses_a_model_of_the_chain(client, auth, app):
    session_id = new_chat(client, auth)
    assert client.get(f"/sessions/{session_id}", headers=auth).get_json()["model"] is None
    chosen = client.patch(f"/sessions/{session_id}", json={"model": FALLBACK}, headers=auth)
    assert chosen.status_code == 200 and chosen.get_json()["model"] == FALLBACK
    assert client.get(f"/sessions/{session_id}", headers=auth).get_json()["model"] == FALLBACK
    renamed = client.patch(f"/sessions/{session_id}", json={"name": "Kept"}, headers=auth).get_json()
    assert (renamed["name"], renamed["model"]) == ("Kept", FALLBACK)  # a rename keeps the choice
    unknown = client.patch(f"/sessions/{session_id}", json={"model": "openai:gpt-9", "name": "No"}, headers=auth)
    assert unknown.status_code == 400 and unknown.get_json()["error"]["code"] == "unknown_model"
    assert client.get(f"/sessions/{session_id}", headers=auth).get_json()["name"] == "Kept"  # nothing half-done
    other = {"Authorization": f"Bearer {new_token(app, 'bob')}"}
    assert client.patch(f"/sessions/{session_id}", json={"model": FALLBACK}, headers=other).status_code == 404
    cleared = client.patch(f"/sessions/{session_id}", json={"model": None}, headers=auth).get_json()
    assert cleared["model"] is None
