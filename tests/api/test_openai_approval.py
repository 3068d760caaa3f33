"""Approval over `/v1` (SPEC 8, 11), driven by the official `openai` SDK against the real server:
the question is text showing the exact command, and the client's next message answers it
(`yes` runs the command, anything else declines it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import requests

from testing.fake_llm import FakeLLMServer
from testing.hostile import ServerUnderTest, running_server
from tests.markup_support import DetailsParser

pytestmark = pytest.mark.slow

WRITE = "/write_file notes.md\nhello ``` world"


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLMServer) -> Iterator[ServerUnderTest]:
    env = {
        "LLM_PROVIDER": "openai",
        "LLM_BASE_URL": llm.openai_base_url,
        "LLM_MODEL": "m",
        "RATE_LIMITS": "turns=off,sessions=off",
        "PROMPT_DEMOS": "0",
    }
    with running_server(tmp_path_factory.mktemp("openai-approval"), env) as running:
        yield running


@pytest.fixture()
def fake(llm: FakeLLMServer) -> FakeLLMServer:
    llm.reset()
    return llm


def sdk(server: ServerUnderTest) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base}/v1", api_key=server.admin_token, max_retries=0)


def note(server: ServerUnderTest) -> str | None:
    """The note's text in the user's workspace, None when there is none."""
    response = requests.post(
        f"{server.base}/tools/read_file",
        json={"path": "notes.md"},
        headers=server.auth(server.admin_token),
        timeout=10,
    )
    if response.status_code != 200:
        return None
    return str(response.json()["content"])


def blocks(content: str) -> list[dict[str, Any]]:
    parser = DetailsParser()
    parser.feed(content)
    return [attrs for tag, attrs in parser.elements if tag == "details"]


def reset_note(server: ServerUnderTest) -> None:
    """A direct call (the user's own: it never asks) puts the note back to a known text."""
    requests.post(
        f"{server.base}/tools/write_file",
        json={"path": "notes.md", "content": "x"},
        headers=server.auth(server.admin_token),
        timeout=10,
    )


@pytest.mark.parametrize(
    ("reply", "runs", "stream"), [("Yes.", True, False), ("yes", True, True), ("no thanks", False, False)]
)
def test_the_next_message_answers_the_approval(
    server: ServerUnderTest, fake: FakeLLMServer, reply: str, runs: bool, stream: bool
) -> None:
    fake.queue(WRITE, "Done with the note.")
    client = sdk(server)
    before = note(server)
    raw = client.chat.completions.with_raw_response.create(
        model="orchestrator", messages=[{"role": "user", "content": "save a note"}]
    )
    question = raw.parse().choices[0].message.content or ""
    session_id = raw.headers["X-Session-Id"]
    assert [b["name"] for b in blocks(question)] == ["write_file"]
    assert question.endswith(
        "Allow the assistant to run /write_file notes.md?\n\n````\n/write_file notes.md\nhello ``` world\n````"
        "\n\n_Reply **yes** to run it; any other answer declines it._"
    )
    assert note(server) == before and len(fake.requests) == 1  # nothing ran
    answer = client.chat.completions.create(
        model="orchestrator",
        extra_headers={"X-Session-Id": session_id},
        messages=[{"role": "user", "content": reply}],
        stream=stream,
    )
    content = (
        "".join(c.choices[0].delta.content or "" for c in answer if c.choices)  # type: ignore[union-attr]
        if stream
        else answer.choices[0].message.content  # type: ignore[union-attr]
    ) or ""
    [block] = blocks(content)
    result = json.loads(block["result"] or "")
    assert content.endswith("Done with the note.")
    if runs:
        assert "notes.md (15 bytes" in result  # the write_file result the model read
        assert "DECLINED" not in result and note(server) == "hello ``` world"
    else:
        assert "Error: DECLINED: the user declined to run /write_file notes.md" in result
        assert note(server) == before
    messages = requests.get(
        f"{server.base}/sessions/{session_id}/messages", headers=server.auth(server.admin_token), timeout=10
    ).json()["messages"]
    assert [m["role"] for m in messages] == [
        "user",
        "ui_tools",
        "file_tools",
        "assistant",
    ]  # no user message of its own
    assert messages[2]["meta"]["approval"] == ("approved" if runs else "declined")
    if runs:
        reset_note(server)


def test_history_naming_the_approval_answers_it_once(server: ServerUnderTest, fake: FakeLLMServer) -> None:
    """No X-Session-Id (Open WebUI): the resent question's block names the call; a replay is a new turn."""
    fake.queue(WRITE, "Not saved.", "A fresh start.")
    client = sdk(server)
    before = note(server)
    first = [{"role": "user", "content": "save a note"}]
    raw = client.chat.completions.with_raw_response.create(model="orchestrator", messages=first)
    question = raw.parse().choices[0].message.content
    history = [*first, {"role": "assistant", "content": question}, {"role": "user", "content": "no"}]
    answered = client.chat.completions.with_raw_response.create(model="orchestrator", messages=history)
    assert answered.headers["X-Session-Id"] == raw.headers["X-Session-Id"]
    assert (answered.parse().choices[0].message.content or "").endswith("Not saved.")
    history[-1] = {"role": "user", "content": "yes"}  # a replay that says yes now: the call is closed
    again = client.chat.completions.with_raw_response.create(model="orchestrator", messages=history)
    assert again.headers["X-Session-Id"] != raw.headers["X-Session-Id"]
    assert again.parse().choices[0].message.content == "A fresh start."
    assert note(server) == before
