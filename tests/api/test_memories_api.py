"""The memory page's API (`api/memories.py`): list, search, add, edit, delete; on both engines."""

from __future__ import annotations

from typing import Any

import pytest

from api.services import services_of
from storage.memories import add_memory
from storage.users import create_user
from tests.conftest import new_token

CSRF = {"X-Requested-With": "fetch"}


@pytest.fixture
def base_settings(base_settings: dict[str, Any], backend_settings: dict[str, str]) -> dict[str, Any]:
    """Every test here runs on both backends: SQLite and PostgreSQL (tests/pg_support.py)."""
    return {**base_settings, **backend_settings}


@pytest.fixture
def bob(app):
    return {"Authorization": f"Bearer {new_token(app, 'bob')}"}


def remember(app, name: str, *facts: str) -> list[int]:
    with services_of(app).database.connection() as conn:
        row = conn.execute("SELECT id FROM users WHERE name = ?", (name,)).fetchone()
        user_id = row["id"] if row is not None else create_user(conn, name)[0].id
        return [add_memory(conn, user_id, fact).id for fact in facts]


def contents(answer) -> list[str]:
    return [memory["content"] for memory in answer.get_json()["memories"]]


def test_list_is_newest_first_and_paged(client, auth, app):
    ids = remember(app, "alice", "one", "two", "three")
    first = client.get("/api/memories?limit=2", headers=auth).get_json()
    assert [m["content"] for m in first["memories"]] == ["three", "two"] and first["has_more"] is True
    rest = client.get(f"/api/memories?limit=2&before={first['memories'][-1]['id']}", headers=auth).get_json()
    assert [m["id"] for m in rest["memories"]] == [ids[0]] and rest["has_more"] is False


def test_search_uses_the_full_text_index_and_only_the_users_memories(client, auth, app, bob):
    remember(app, "alice", "My cat is called Tigger", "I live in Lyon", "Tigger likes tuna")
    remember(app, "bob", "Tigger is my dog")
    found = client.get("/api/memories?q=tigger", headers=auth)
    assert found.status_code == 200
    assert sorted(contents(found)) == ["My cat is called Tigger", "Tigger likes tuna"]
    assert contents(client.get("/api/memories?q=TIGGER%20lyon&limit=1", headers=auth)) != []
    assert contents(client.get("/api/memories?q=nothing-like-it", headers=auth)) == []
    assert contents(client.get("/api/memories?q=%22%3A*%20OR", headers=auth)) == []  # no query syntax
    assert contents(client.get("/api/memories?q=tigger", headers=bob)) == ["Tigger is my dog"]


def test_add_edit_delete_and_the_index_follows(client, auth):
    added = client.post("/api/memories", json={"content": "  I like tea  "}, headers=auth)
    assert added.status_code == 201 and added.get_json()["content"] == "I like tea"
    memory_id = added.get_json()["id"]
    again = client.post("/api/memories", json={"content": "I like tea"}, headers=auth)
    assert again.status_code == 200 and again.get_json()["id"] == memory_id
    edited = client.patch(f"/api/memories/{memory_id}", json={"content": "I like coffee"}, headers=auth)
    assert edited.status_code == 200 and edited.get_json()["content"] == "I like coffee"
    assert contents(client.get("/api/memories?q=coffee", headers=auth)) == ["I like coffee"]
    assert contents(client.get("/api/memories?q=tea", headers=auth)) == []
    assert client.delete(f"/api/memories/{memory_id}", headers=auth).status_code == 204
    assert contents(client.get("/api/memories", headers=auth)) == []
    assert client.delete(f"/api/memories/{memory_id}", headers=auth).status_code == 404


def test_another_users_memory_answers_404_like_a_missing_one(client, auth, app, bob):
    (bobs,) = remember(app, "bob", "Bob's secret")
    for answer in (
        client.patch(f"/api/memories/{bobs}", json={"content": "mine now"}, headers=auth),
        client.delete(f"/api/memories/{bobs}", headers=auth),
        client.patch("/api/memories/999999", json={"content": "x"}, headers=auth),
    ):
        assert answer.status_code == 404 and answer.get_json()["error"]["code"] == "not_found"
    assert contents(client.get("/api/memories", headers=bob)) == ["Bob's secret"]


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("post", "/api/memories", {"content": ""}),
        ("post", "/api/memories", {"content": "x" * 2001}),
        ("post", "/api/memories", {"content": "ok", "importance": 11}),
        ("post", "/api/memories", {"content": "ok", "extra": 1}),
        ("get", "/api/memories?limit=0", None),
        ("get", "/api/memories?limit=201", None),
        ("get", "/api/memories?before=x", None),
        ("get", "/api/memories?q=" + "a" * 501, None),
    ],
)
def test_sizes_are_bounded_like_remember(client, auth, method, path, body):
    answer = getattr(client, method)(path, json=body, headers=auth) if body else client.get(path, headers=auth)
    assert answer.status_code == 400, answer.get_json()


def test_edit_is_bounded_too(client, auth, app):
    (memory_id,) = remember(app, "alice", "short")
    assert client.patch(f"/api/memories/{memory_id}", json={"content": "y" * 2001}, headers=auth).status_code == 400
    assert client.patch(f"/api/memories/{memory_id}", json={"content": "   "}, headers=auth).status_code == 400


def test_memories_need_a_user(client):
    assert client.get("/api/memories").status_code == 401
