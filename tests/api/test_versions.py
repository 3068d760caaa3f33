"""Versions of a chat (SPEC 17) over HTTP: regenerate, edit, switch, the tree, failed turns.

The fake provider records every request: each test checks that the model saw exactly the
branch on screen (never the other version), and that SPEC 6's order rules hold on each branch.
Both engines: SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from api.services import services_of
from testing.fake_llm import FakeLLMServer
from tests.conftest import new_token


@pytest.fixture
def base_settings(base_settings: dict[str, Any], backend_settings: dict[str, str]) -> dict[str, Any]:
    """Every test here runs on SQLite and on PostgreSQL (tests/pg_support.py)."""
    return {**base_settings, **backend_settings}


def chat(client: FlaskClient, auth: dict[str, str], message: str, **extra: Any) -> dict[str, Any]:
    response = client.post("/chat", json={"message": message, **extra}, headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def regenerate(client: FlaskClient, auth: dict[str, str], session_id: str, message_id: int) -> Any:
    return client.post(f"/sessions/{session_id}/regenerate", json={"message_id": message_id}, headers=auth)


def switch(client: FlaskClient, auth: dict[str, str], session_id: str, message_id: int) -> Any:
    return client.post(f"/sessions/{session_id}/branch", json={"message_id": message_id}, headers=auth)


def branch(client: FlaskClient, auth: dict[str, str], session_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/sessions/{session_id}/messages", headers=auth)
    assert response.status_code == 200
    return response.get_json()["messages"]


def seen(fake_llm: FakeLLMServer) -> list[tuple[str, str]]:
    """The last provider call's conversation, the system prompt left out."""
    return [(m["role"], m["content"]) for m in fake_llm.requests[-1]["messages"] if m["role"] != "system"]


def ids_of(messages: list[dict[str, Any]], role: str) -> list[int]:
    return [m["id"] for m in messages if m["role"] == role]


def test_regenerate_keeps_both_answers_and_the_next_turn_sees_only_the_branch_on_screen(client, auth, fake_llm):
    fake_llm.queue("first answer", "second answer", "after second", "after first")
    first = chat(client, auth, "question one")
    session_id = first["session_id"]
    question_id, first_answer = first["messages"][0]["id"], first["messages"][1]["id"]

    again = regenerate(client, auth, session_id, first_answer)
    assert again.status_code == 200
    body = again.get_json()
    assert body["reply"] == "second answer" and body["turn_id"]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    assert body["messages"][0]["id"] == question_id  # not stored again
    assert seen(fake_llm) == [("user", "question one")]  # the old answer is not in the context
    second_answer = body["messages"][1]["id"]

    shown = branch(client, auth, session_id)
    assert [m["content"] for m in shown] == ["question one", "second answer"]
    assert shown[1]["parent_id"] == question_id
    assert shown[1]["versions"] == {"index": 2, "count": 2, "ids": [first_answer, second_answer]}
    assert "versions" not in shown[0]

    chat(client, auth, "next", session_id=session_id)
    assert seen(fake_llm) == [("user", "question one"), ("assistant", "second answer"), ("user", "next")]

    switched = switch(client, auth, session_id, first_answer)
    assert switched.status_code == 200
    assert [m["content"] for m in switched.get_json()["messages"]] == ["question one", "first answer"]
    assert switched.get_json()["messages"][1]["versions"]["index"] == 1
    chat(client, auth, "back on one", session_id=session_id)
    assert seen(fake_llm) == [("user", "question one"), ("assistant", "first answer"), ("user", "back on one")]

    # switching to the second version shows its newest tip, the turn that followed it
    switched = switch(client, auth, session_id, second_answer).get_json()["messages"]
    assert [m["content"] for m in switched] == ["question one", "second answer", "next", "after second"]


def test_edit_makes_a_sibling_user_message_and_answers_on_the_new_branch(client, auth, fake_llm):
    fake_llm.queue("a1", "a2", "a2 edited", "root edited")
    first = chat(client, auth, "q1")
    session_id = first["session_id"]
    second = chat(client, auth, "q2", session_id=session_id)
    q2 = second["messages"][0]["id"]

    edited = chat(client, auth, "q2 edited", session_id=session_id, edit_of=q2)
    assert edited["reply"] == "a2 edited"
    assert seen(fake_llm) == [("user", "q1"), ("assistant", "a1"), ("user", "q2 edited")]
    shown = branch(client, auth, session_id)
    assert [m["content"] for m in shown] == ["q1", "a1", "q2 edited", "a2 edited"]
    assert shown[2]["parent_id"] == first["messages"][1]["id"]
    assert shown[2]["versions"]["ids"] == [q2, shown[2]["id"]] and shown[2]["versions"]["index"] == 2

    # editing the first message starts a new root: the model sees nothing before it
    chat(client, auth, "q1 edited", session_id=session_id, edit_of=first["messages"][0]["id"])
    assert seen(fake_llm) == [("user", "q1 edited")]
    shown = branch(client, auth, session_id)
    assert [m["content"] for m in shown] == ["q1 edited", "root edited"]
    assert shown[0]["parent_id"] is None and shown[0]["versions"]["count"] == 2

    tree = client.get(f"/sessions/{session_id}/messages?tree=1", headers=auth).get_json()
    assert len(tree["messages"]) == 8 and tree["has_more"] is False
    assert [m["id"] for m in tree["messages"]] == sorted(m["id"] for m in tree["messages"])
    assert tree["active_leaf_id"] == shown[-1]["id"]


def test_edit_over_multipart_too(client, auth, fake_llm):
    fake_llm.queue("a1", "a1 again")
    first = chat(client, auth, "q1")
    session_id, q1 = first["session_id"], first["messages"][0]["id"]
    response = client.post(
        "/chat",
        data={"message": "q1 again", "session_id": session_id, "edit_of": str(q1)},
        headers=auth,
        content_type="multipart/form-data",
    )
    assert response.status_code == 200, response.get_json()
    assert [m["content"] for m in branch(client, auth, session_id)] == ["q1 again", "a1 again"]


def test_tool_turns_keep_the_order_rules_on_every_branch(client, auth, fake_llm):
    fake_llm.queue("/remember I like tea", "Noted.", "/remember I like coffee", "Noted coffee.")
    first = chat(client, auth, "remember tea")
    session_id = first["session_id"]
    assert [m["role"] for m in first["messages"]] == ["user", "memory_tools", "assistant"]
    again = regenerate(client, auth, session_id, first["messages"][2]["id"]).get_json()
    assert [m["role"] for m in again["messages"]] == ["user", "memory_tools", "assistant"]
    for version in (first["messages"][1]["id"], again["messages"][1]["id"]):
        shown = switch(client, auth, session_id, version).get_json()["messages"]
        assert [m["role"] for m in shown] == ["user", "memory_tools", "assistant"]
        assert [m["id"] for m in shown] == sorted(m["id"] for m in shown)
        assert all(child["parent_id"] == parent["id"] for parent, child in zip(shown, shown[1:], strict=False))
    # the second pass of the regenerated turn saw its own tool result, never the first version's
    assert "coffee" in fake_llm.requests[-1]["messages"][-1]["content"]
    assert not any("I like tea" in m["content"] for m in fake_llm.requests[-1]["messages"][1:])


def test_regenerate_streams_as_sse(client, auth, fake_llm):
    fake_llm.queue("one", "two")
    first = chat(client, auth, "hi")
    response = client.post(
        f"/sessions/{first['session_id']}/regenerate",
        json={"message_id": first["messages"][0]["id"]},
        headers={**auth, "Accept": "text/event-stream"},
    )
    assert response.status_code == 200
    text = response.get_data(as_text=True)
    assert "event: turn.started" in text and "event: done" in text and '"two"' in text


def test_foreign_and_missing_ids_answer_404(app: Flask, client, auth, fake_llm):
    fake_llm.queue("a", "b")
    mine = chat(client, auth, "mine")
    other_chat = chat(client, auth, "other chat")
    other_user = {"Authorization": f"Bearer {new_token(app, 'bob')}"}
    session_id, foreign_id = mine["session_id"], other_chat["messages"][0]["id"]
    calls = len(fake_llm.requests)
    for response in (
        regenerate(client, auth, session_id, foreign_id),  # a message of another of my sessions
        regenerate(client, auth, session_id, 10**9),
        regenerate(client, other_user, session_id, mine["messages"][0]["id"]),  # another user's session
        switch(client, auth, session_id, foreign_id),
        switch(client, other_user, session_id, mine["messages"][0]["id"]),
        client.post("/chat", json={"message": "x", "session_id": session_id, "edit_of": foreign_id}, headers=auth),
    ):
        assert response.status_code == 404, response.get_json()
        assert response.get_json()["error"]["code"] == "not_found"
    assert len(fake_llm.requests) == calls
    edit_answer = {"message": "x", "session_id": session_id, "edit_of": mine["messages"][1]["id"]}
    assert client.post("/chat", json=edit_answer, headers=auth).status_code == 400


def test_a_running_turn_makes_regenerate_and_branch_answer_409(app: Flask, client, auth, fake_llm):
    fake_llm.queue("a")
    mine = chat(client, auth, "mine")
    session_id, question = mine["session_id"], mine["messages"][0]["id"]
    with services_of(app).desk.claim(session_id, user_id=None) as claim:
        for response in (regenerate(client, auth, session_id, question), switch(client, auth, session_id, question)):
            assert response.status_code == 409
            assert response.get_json()["error"]["code"] == "turn_in_progress"
            assert response.get_json()["turn_id"] == claim.turn_id
    assert switch(client, auth, session_id, question).status_code == 200


@pytest.mark.parametrize("retry_with", ["regenerate", "the answer's id"])
def test_a_failed_turn_is_marked_on_its_message_and_regenerate_retries_it(client, auth, fake_llm, retry_with):
    fake_llm.queue("fine")
    session_id = chat(client, auth, "first")["session_id"]
    fake_llm.queue(500, 500)
    failed = client.post("/chat", json={"message": "will fail", "session_id": session_id}, headers=auth)
    assert failed.status_code == 502
    user_message_id = failed.get_json()["user_message_id"]
    shown = branch(client, auth, session_id)
    assert shown[-1]["id"] == user_message_id
    assert shown[-1]["meta"]["turn_error"]["code"] == "provider_unavailable"
    assert shown[-1]["meta"]["turn_error"]["message"]
    assert [m["role"] for m in shown] == ["user", "assistant", "user"]  # no fake assistant message (6.4)

    fake_llm.queue("answered now")
    retried = regenerate(client, auth, session_id, user_message_id)
    assert retried.status_code == 200
    assert seen(fake_llm) == [("user", "first"), ("assistant", "fine"), ("user", "will fail")]
    shown = branch(client, auth, session_id)
    assert [m["content"] for m in shown] == ["first", "fine", "will fail", "answered now"]
    assert "meta" not in shown[2]  # the mark is gone with the answer


CHOICE = "/ask_choice experience How much Python have you written?\n- none\n- some\n- a lot"


def test_a_question_of_another_version_answers_409_until_it_is_shown(client, auth, fake_llm):
    fake_llm.queue(CHOICE, "plain answer", "Thanks, some it is.")
    first = chat(client, auth, "ask me")
    session_id, question, pending = first["session_id"], first["messages"][0]["id"], first["messages"][1]
    assert pending["meta"]["status"] == "pending"
    assert regenerate(client, auth, session_id, question).get_json()["reply"] == "plain answer"
    meta = pending["meta"]
    body = {
        "conversationId": session_id,
        "toolCallId": meta["tool_call_id"],
        "toolName": "ask_choice",
        "targetField": "experience",
        "value": "some",
    }
    calls = len(fake_llm.requests)
    refused = client.post("/api/ai/tool-result", json=body, headers=auth)
    assert refused.status_code == 409 and refused.get_json()["error"]["code"] == "not_on_active_branch"
    assert len(fake_llm.requests) == calls
    assert switch(client, auth, session_id, pending["id"]).status_code == 200
    answered = client.post("/api/ai/tool-result", json=body, headers=auth)
    assert answered.status_code == 200, answered.get_json()
    shown = branch(client, auth, session_id)
    assert [m["role"] for m in shown] == ["user", "ui_tools", "ui_tools", "assistant"]
    assert shown[-1]["content"] == "Thanks, some it is."
