"""What follows the first line of a command that takes no body is discarded (SPEC 5, 7): never
stored, shown, streamed or sent, even when the model's server delivered it with the line."""

from __future__ import annotations

import json
from typing import Any

import pytest

from testing.fake_llm import FakeLLMServer, StreamReply


@pytest.fixture
def base_settings(base_settings: dict[str, Any]) -> dict[str, Any]:
    """`/write_file` runs at once here (asking first: tests/api/test_approval_api.py)."""
    return {**base_settings, "tool_approval": "none"}


SECRET = "LEAKED-LINE-42"


def test_the_lines_after_a_body_less_command_are_never_stored_or_sent(client, auth, fake_llm: FakeLLMServer) -> None:
    # one piece: the gate cannot stop the stream before the extra lines arrived
    fake_llm.queue(StreamReply((f"/remember I like tea\n{SECRET}\nand {SECRET} again",)), "Noted.")
    answer = client.post("/chat", json={"message": "remember that I like tea"}, headers=auth)
    assert answer.status_code == 200
    body = answer.get_json()
    assert SECRET not in json.dumps(body)
    session_id = body["session_id"]
    listed = client.get(f"/sessions/{session_id}/messages", headers=auth).get_json()
    assert SECRET not in json.dumps(listed)
    tool_message = next(m for m in listed["messages"] if m["role"] == "memory_tools")
    assert tool_message["meta"]["args"] == "I like tea" and "body" not in tool_message["meta"]
    second_pass = fake_llm.requests[-1]["messages"]
    assert SECRET not in json.dumps(second_pass)  # the model's next pass never sees it either


def test_a_command_that_takes_a_body_keeps_it(client, auth, fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(StreamReply(("/write_file notes.txt\nline one\nline two",)), "Written.")
    answer = client.post("/chat", json={"message": "write my notes"}, headers=auth).get_json()
    tool_message = next(m for m in answer["messages"] if m["role"] == "file_tools")
    assert tool_message["meta"]["body"] == "line one\nline two"
