"""Demonstrations and the turn's catalog (SPEC 6.2): what the first pass's context holds, with
`PROMPT_DEMOS=1`, and which commands a turn offers."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from api.services import services_of
from commands.detect import detect_command
from learner.importer import import_task_file
from pipeline.catalog import EVERYTHING, Reach, offered
from pipeline.demos import DEMO_NOTE, MAX_COMMAND_DEMOS, PLAIN_ANSWER, PLAIN_REQUEST, demonstrations
from pipeline.prompt import PromptBook
from testing.fake_llm import FakeLLMServer, tiny_png
from tests.conftest import new_token
from tools.base import Need
from tools.catalog import build_registry

ROOT = Path(__file__).resolve().parents[2]
NONE = Reach.of(judge=False, image_provider=False, image=False, course=False)


@pytest.fixture
def app(make_app: Any, fake_llm: FakeLLMServer) -> Flask:
    return make_app(llm_base_url=fake_llm.openai_base_url, prompt_demos=1)


@pytest.fixture
def auth(app: Flask) -> dict[str, str]:
    return {"Authorization": f"Bearer {new_token(app)}"}


def chat(client: FlaskClient, auth: dict[str, str], message: str, **extra: Any) -> Any:
    return client.post("/chat", json={"message": message, **extra}, headers=auth)


def demo_part(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    expected = demonstrations(offered(build_registry(), NONE))
    return messages[1 : 1 + len(expected)]


def test_a_first_pass_carries_the_demonstrations_before_the_history(client, auth, fake_llm) -> None:
    fake_llm.queue("first answer", "second answer")
    session_id = chat(client, auth, "first question").get_json()["session_id"]
    chat(client, auth, "second question", session_id=session_id)
    sent = fake_llm.requests[-1]["messages"]
    expected = demonstrations(offered(build_registry(), NONE))
    assert sent[0]["role"] == "system" and DEMO_NOTE in sent[0]["content"]
    assert [(m["role"], m["content"]) for m in demo_part(sent)] == [(m.role, m.content) for m in expected]
    history = sent[1 + len(expected) :]
    assert [(m["role"], m["content"]) for m in history] == [
        ("user", "first question"),
        ("assistant", "first answer"),
        ("user", "second question"),  # the user's message stays last, and its own message
    ]
    roles = [m["role"] for m in sent[1:]]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False))


def test_demonstrations_alternate_commands_that_work_here_with_plain_answers_the_last_plain() -> None:
    catalog = offered(build_registry(), NONE)
    pairs = demonstrations(catalog)
    replies = [m.content for m in pairs if m.role == "assistant"]
    commands = [detect_command(reply) for reply in replies[0::2]]
    assert 1 <= len(commands) <= MAX_COMMAND_DEMOS
    assert all(detect_command(reply) is None for reply in replies[1::2])  # each command followed by prose
    names = {tool.command.name for tool in catalog if tool.command}
    for command in commands:
        assert command is not None and command.name in names and command.line == command.line.strip()
    assert len({command.name for command in commands if command}) == len(commands)  # one per kind
    assert (pairs[-2].content, pairs[-1].content) == (PLAIN_REQUEST, PLAIN_ANSWER)
    assert detect_command(PLAIN_ANSWER) is None


def test_no_demonstration_of_a_command_whose_argument_swallows_any_message() -> None:
    registry = build_registry()
    swallowing = {tool.command.name for tool in registry.commands() if tool.command and not tool.command.demonstrates}
    assert {"remember", "imagine", "image_analyze"} <= swallowing
    shown = {detect_command(m.content) for m in demonstrations(offered(registry, EVERYTHING)) if m.role == "assistant"}
    assert not {command.name for command in shown if command} & swallowing


def test_demonstrations_are_never_stored_shown_or_counted(make_app, fake_llm) -> None:
    app = make_app(llm_base_url=fake_llm.openai_base_url, prompt_demos=1, context_messages=2)
    client, auth = app.test_client(), {"Authorization": f"Bearer {new_token(app)}"}
    fake_llm.queue("a1", "a2", "a3")
    session_id = chat(client, auth, "q1").get_json()["session_id"]
    chat(client, auth, "q2", session_id=session_id)
    answer = chat(client, auth, "q3", session_id=session_id).get_json()
    assert [m["role"] for m in answer["messages"]] == ["user", "assistant"]
    stored = client.get(f"/sessions/{session_id}/messages", headers=auth).get_json()["messages"]
    assert [m["content"] for m in stored] == ["q1", "a1", "q2", "a2", "q3", "a3"]
    sent = fake_llm.requests[-1]["messages"]
    expected = demonstrations(offered(build_registry(), NONE))
    # CONTEXT_MESSAGES=2 counts stored messages only: q2 and a2, then the pending q3
    assert [m["content"] for m in sent[1 + len(expected) :]] == ["q2", "a2", "q3"]


def test_the_second_pass_has_no_demonstrations(client, auth, fake_llm) -> None:
    fake_llm.queue("/remember I like tea", "Noted.")
    assert chat(client, auth, "remember that I like tea").status_code == 200
    first, second = fake_llm.requests[-2]["messages"], fake_llm.requests[-1]["messages"]
    assert demo_part(first)[0]["content"] != "remember that I like tea"
    assert DEMO_NOTE not in second[0]["content"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[1]["content"] == "remember that I like tea"


def test_prompt_demos_0_sends_none(make_app, fake_llm) -> None:
    app = make_app(llm_base_url=fake_llm.openai_base_url, prompt_demos=0)
    fake_llm.queue("hi")
    chat(app.test_client(), {"Authorization": f"Bearer {new_token(app)}"}, "hello")
    sent = fake_llm.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"] and DEMO_NOTE not in sent[0]["content"]


# --------------------------------------------------------------------------- the catalog of a turn


def test_each_need_unlocks_its_commands() -> None:
    registry = build_registry()

    def names(**met: bool) -> set[str]:
        reach = Reach.of(**{"judge": False, "image_provider": False, "image": False, "course": False, **met})
        return {tool.name for tool in offered(registry, reach)}

    base = names()
    assert {"weather", "remember", "web_search", "read_file"} <= base
    assert names(judge=True) - base == {"run_code"}
    assert names(image_provider=True) - base == {"imagine"}
    assert names(image=True) - base == {"image_analyze"}
    learner = names(course=True) - base
    assert {"get_ready", "start_task", "submit", "ask_choice", "ask_text", "confirm"} <= learner
    assert all(Need.COURSE in tool.needs for tool in registry if tool.name in learner)


def test_an_image_changes_only_the_end_of_the_command_list() -> None:
    """A model server's prompt cache keeps the shared prefix (SPEC: keep the prefix stable)."""
    book = PromptBook(build_registry())
    without = book.system_prompt(NONE)
    with_image = book.system_prompt(Reach.of(judge=False, image_provider=False, image=True, course=False))
    assert with_image.startswith(without.rstrip("\n"))
    assert with_image[len(without.rstrip("\n")) :].lstrip().startswith("- /image_analyze")


def test_the_turn_offers_image_analyze_only_with_an_image_in_reach(client, auth, fake_llm) -> None:
    fake_llm.queue("plain", "looked")
    session_id = chat(client, auth, "hello").get_json()["session_id"]
    assert "/image_analyze" not in fake_llm.requests[-1]["messages"][0]["content"]
    chat(
        client,
        auth,
        "what is this?",
        session_id=session_id,
        images=["data:image/png;base64," + base64.b64encode(tiny_png()).decode()],
    )
    assert "/image_analyze" in fake_llm.requests[-1]["messages"][0]["content"]


def test_a_course_brings_the_learner_commands(app, client, auth, fake_llm) -> None:
    fake_llm.queue("a", "b")
    chat(client, auth, "hello")
    assert "/get_ready" not in fake_llm.requests[-1]["messages"][0]["content"]
    with services_of(app).database.connection() as conn:
        import_task_file(conn, str(ROOT / "examples" / "tasks" / "intro_python.yaml"))
    chat(client, auth, "what can I do next?")
    assert "/get_ready" in fake_llm.requests[-1]["messages"][0]["content"]
