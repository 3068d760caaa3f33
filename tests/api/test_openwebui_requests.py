"""What Open WebUI 0.12.4 really sends to `/v1`, replayed against the real server (SPEC 11).

The requests were recorded from a running Open WebUI (`tests/fixtures/openwebui/README.md`);
CI cannot install its 7.4 GB venv, so the live check is `scripts/openwebui_check.sh` and this
file replays its record. The scripted provider answers from the same reply file as on
record. Blocks are read the way Open WebUI's frontend reads them (`marked/extension.ts`:
the opening tag up to `>\\n`, attributes by `(\\w+)="(.*?)"`, values through an HTML decode,
then `JSON.parse` in `ToolCallDisplay.svelte`).
"""

from __future__ import annotations

import copy
import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from testing.hostile import ServerUnderTest, running_server

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parents[1] / "fixtures" / "openwebui"
RECORD = [json.loads(line) for line in (FIXTURES / "requests.jsonl").read_text(encoding="utf-8").splitlines()]
DETAILS_OPEN = re.compile(r"^<details(\s+[^>]*)?>\n", re.M)
ATTRIBUTE = re.compile(r'(\w+)="(.*?)"')
SENT_AS_IS = {"content-type", "accept", "user-agent"}  # Host, Content-Length: the new connection's own
TEA = "please remember that I like green tea"
SAVED = "Got it, I saved that to your memories."


def recorded(*, stream: bool | None = None, last_user: str | None = None, history: bool = False) -> dict[str, Any]:
    """The one recorded chat request that matches (a fresh copy)."""
    found = [
        entry
        for entry in RECORD
        if entry["method"] == "POST"
        and (stream is None or entry["body"].get("stream") is stream)
        and (last_user is None or entry["body"]["messages"][-1]["content"] == last_user)
        and (len(entry["body"]["messages"]) > 1) is history
    ]
    assert len(found) == 1, f"{len(found)} recorded requests match"
    return copy.deepcopy(found[0])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerUnderTest]:
    env = {
        "LLM_PROVIDER": "scripted",
        "SCRIPTED_REPLIES": str(FIXTURES / "replies.json"),
        "RATE_LIMITS": "turns=off,sessions=off",
    }
    with running_server(tmp_path_factory.mktemp("openwebui"), env) as running:
        yield running


def replay(server: ServerUnderTest, entry: dict[str, Any]) -> requests.Response:
    headers = {name: value for name, value in entry["headers"].items() if name.lower() in SENT_AS_IS}
    headers.update(server.auth(server.admin_token))
    body = json.dumps(entry["body"]).encode() if entry["body"] is not None else None
    return requests.request(entry["method"], f"{server.base}{entry['path']}", headers=headers, data=body, timeout=60)


def content_of(response: requests.Response, stream: bool) -> str:
    assert response.status_code == 200, response.text
    if not stream:
        return str(response.json()["choices"][0]["message"]["content"])
    assert response.headers["Content-Type"].startswith("text/event-stream")
    frames = [frame[6:] for frame in response.text.split("\n\n") if frame.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(frame) for frame in frames[:-1]]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def owui_blocks(content: str) -> list[dict[str, Any]]:
    blocks = []
    for match in DETAILS_OPEN.finditer(content):
        attributes: dict[str, Any] = {key: html.unescape(value) for key, value in ATTRIBUTE.findall(match.group(0))}
        if attributes.get("type") == "tool_calls":
            attributes["arguments"] = json.loads(attributes["arguments"])
            attributes["result"] = json.loads(attributes["result"])
            blocks.append(attributes)
    return blocks


def stored(server: ServerUnderTest, session_id: str) -> list[dict[str, Any]]:
    response = requests.get(
        f"{server.base}/sessions/{session_id}/messages", headers=server.auth(server.admin_token), timeout=10
    )
    return list(response.json()["messages"])


def test_the_record_is_what_the_readme_says() -> None:
    assert len(RECORD) == 19
    assert [entry["method"] for entry in RECORD].count("GET") == 2
    assert {entry["headers"]["User-Agent"] for entry in RECORD} == {"Python/3.11 aiohttp/3.14.5"}
    bodies = [entry["body"] for entry in RECORD if entry["method"] == "POST"]
    assert not any({"stream_options", "user", "metadata", "chat_id", "tools"} & set(body) for body in bodies)
    assert not any("X-Session-Id" in entry["headers"] for entry in RECORD)


def test_model_list_request(server: ServerUnderTest) -> None:
    response = replay(server, RECORD[0])
    assert response.status_code == 200
    assert [model["id"] for model in response.json()["data"]] == ["orchestrator"]


@pytest.mark.parametrize("stream", [False, True])
def test_api_requests_plain(server: ServerUnderTest, stream: bool) -> None:
    response = replay(server, recorded(stream=stream, last_user="hello"))
    assert content_of(response, stream) == "Hello from the orchestrator."
    assert response.headers["X-Session-Id"]


@pytest.mark.parametrize("stream", [False, True])
def test_api_requests_tool_turn(server: ServerUnderTest, stream: bool) -> None:
    entry = next(
        e
        for e in RECORD
        if e["method"] == "POST"
        and e["body"] == {"model": "orchestrator", "stream": stream, "messages": [{"role": "user", "content": TEA}]}
    )
    content = content_of(replay(server, copy.deepcopy(entry)), stream)
    blocks = owui_blocks(content)
    assert len(blocks) == 1 and content.endswith(SAVED)
    assert blocks[0]["name"] == "remember" and blocks[0]["done"] == "true"
    assert blocks[0]["arguments"] == {"command_line": "/remember The user's favourite drink is green tea"}
    assert "favourite drink is green tea" in blocks[0]["result"]


def test_api_request_with_an_image(server: ServerUnderTest) -> None:
    entry = next(e for e in RECORD if e["method"] == "POST" and isinstance(e["body"]["messages"][-1]["content"], list))
    parts = entry["body"]["messages"][-1]["content"]
    assert [part["type"] for part in parts] == ["text", "image_url"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    response = replay(server, entry)
    assert content_of(response, False) == "A small red rectangle."
    messages = stored(server, response.headers["X-Session-Id"])
    assert messages[0]["content"] == "what is in this picture?"
    assert [(image["mime"], image["width"], image["height"]) for image in messages[0]["meta"]["images"]] == [
        ("image/png", 4, 3)
    ]


@pytest.mark.parametrize("task", ["Generate a concise title", "Predict 3-5 useful messages", "Generate 1-3 broad tags"])
def test_background_task_requests(server: ServerUnderTest, task: str) -> None:
    """Open WebUI's title, follow-up and tag tasks are ordinary turns (each its own session)."""
    entry = next(e for e in RECORD if e["method"] == "POST" and task in e["body"]["messages"][0]["content"])
    response = replay(server, entry)
    answer = json.loads(content_of(response, False))
    assert answer["title"] == "Orchestrator chat" and answer["tags"] == ["General"]
    messages = stored(server, response.headers["X-Session-Id"])
    assert [m["role"] for m in messages] == ["user", "assistant"]


def test_follow_up_resends_our_block_and_it_is_not_imported(server: ServerUnderTest) -> None:
    entry = recorded(last_user="how many messages have I sent?", history=True)
    history = entry["body"]["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert history[1]["content"].startswith('<details type="tool_calls" done="true" ')  # as Open WebUI resends it
    response = replay(server, entry)
    content = content_of(response, True)
    assert [block["name"] for block in owui_blocks(content)] == ["memory_sql"]
    assert "Your messages by role" in content
    messages = stored(server, response.headers["X-Session-Id"])
    assert [(m["role"], m["content"], (m.get("meta") or {}).get("imported")) for m in messages[:3]] == [
        ("user", TEA, "openai"),
        ("assistant", SAVED, "openai"),
        ("user", "how many messages have I sent?", None),
    ]
    assert [m["role"] for m in messages[3:]] == ["memory_sql_tools", "assistant"]
    assert not any("<details type=" in m["content"] for m in messages)


def process_details(content: str) -> str:
    """Open WebUI's frontend `processDetails` (`src/lib/utils/index.ts`), which its temporary
    chats apply to message text they resend: each tool block is replaced by its decoded `result`."""

    def by_result(match: re.Match[str]) -> str:
        attributes = dict(re.findall(r'(\w+)="([^"]*)"', match.group(0)))
        return html.unescape(attributes["result"]) if attributes.get("result") else match.group(0)

    return re.sub(r'<details\s+type="tool_calls"([^>]*)>([\s\S]*?)</details>', by_result, content, flags=re.I)


def test_a_temporary_chats_history_is_imported_without_our_results(server: ServerUnderTest) -> None:
    entry = recorded(last_user="how many messages have I sent?", history=True)
    assistant = entry["body"]["messages"][1]
    assistant["content"] = process_details(assistant["content"])
    assert assistant["content"].startswith('"<details>\\n<summary>\U0001f527 memory_tools</summary>')
    response = replay(server, entry)
    assert "Your messages by role" in content_of(response, True)
    messages = stored(server, response.headers["X-Session-Id"])
    assert [(m["role"], m["content"]) for m in messages[:2]] == [("user", TEA), ("assistant", SAVED)]


def test_a_question_is_answered_by_the_next_message(server: ServerUnderTest) -> None:
    """The recorded quiz, wrong answer and right answer, each resent with the answer we gave."""
    asking = recorded(last_user="give me a quiz", history=True)
    response = replay(server, asking)
    question = content_of(response, True)
    session_id = response.headers["X-Session-Id"]
    assert [block["name"] for block in owui_blocks(question)] == ["ask_choice"]
    assert question.endswith(
        "Which drink do you prefer?\n\n1. green tea\n2. coffee\n3. water\n\n"
        "_Reply with one option (its text or its number)._"
    )

    wrong = recorded(last_user="lemonade", history=True)
    wrong["body"]["messages"][-2]["content"] = question  # what Open WebUI resends: our answer
    response = replay(server, wrong)
    refusal = content_of(response, True)
    assert response.headers["X-Session-Id"] == session_id
    assert "That answer does not fit: Value must be one of: green tea, coffee, water." in refusal
    assert owui_blocks(refusal) == owui_blocks(question) and "2. coffee" in refusal
    assert [m["role"] for m in stored(server, session_id)][-1] == "ui_tools"  # nothing stored, still open

    right = recorded(last_user="2", history=True)
    right["body"]["messages"][-2]["content"] = refusal
    response = replay(server, right)
    answer = content_of(response, True)
    assert response.headers["X-Session-Id"] == session_id
    assert answer.endswith("Thanks! The user answered: coffee\n(saved to the profile field favourite_drink)")
    messages = stored(server, session_id)
    assert [m["role"] for m in messages][-3:] == ["ui_tools", "ui_tools", "assistant"]
    assert messages[-3]["meta"]["status"] == "answered" and messages[-2]["meta"]["kind"] == "ui_result"
    profile = requests.get(f"{server.base}/api/profile", headers=server.auth(server.admin_token), timeout=10).json()
    assert profile["fields"]["favourite_drink"]["value"] == "coffee"
    assert profile["fields"]["favourite_drink"]["input_method"] == "selection"


def test_a_recorded_question_from_another_server_is_not_answered(server: ServerUnderTest) -> None:
    """The record's block names a call this server never made: the message is an ordinary turn."""
    entry = recorded(last_user="lemonade", history=True)
    response = replay(server, entry)
    assert content_of(response, True) == "Hello from the orchestrator."
    history = entry["body"]["messages"][:-1]
    assert history[-1]["role"] == "assistant" and 'name="ask_choice"' in history[-1]["content"]
    messages = stored(server, response.headers["X-Session-Id"])
    assert [(m["role"], (m.get("meta") or {}).get("imported")) for m in messages] == [
        *[(m["role"], "openai") for m in history],
        ("user", None),
        ("assistant", None),
    ]
    assert messages[len(history) - 1]["content"].startswith("Which drink do you prefer?\n\n1. green tea")
    assert not any("<details type=" in m["content"] for m in messages)
