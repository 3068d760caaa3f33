"""A turn that can use more commands than `PROMPT_COMMANDS` (a hundred MCP tools): the system
prompt keeps the fixed protocol, the best matches of the user's words are listed in a message
of their own just before the user's message, and the rest of the prompt stays a prefix a model
server's cache holds (`pipeline/prompt.Listing`). Token counts with the real tokenizer:
tests/llm/test_prompt_tokens_real.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evaluation.cases import load_cases
from evaluation.dryrun import function_registry
from pipeline.catalog import EVERYTHING, offered
from pipeline.context import build_context
from pipeline.prompt import CUT_LIST, LISTED_HEADING, LISTED_NOTE, PromptBook
from storage.messages import Message
from storage.roles import ASSISTANT, USER
from testing.fake_llm import FakeLLMServer
from tests.conftest import new_token
from tools.catalog import build_registry
from tools.registry import ToolRegistry

ROOT = Path(__file__).resolve().parents[2]
OUR_CASES = ROOT / "examples" / "eval" / "cases.jsonl"
BFCL = ROOT / "bench" / "bfcl"


def hundred_more(registry: ToolRegistry) -> ToolRegistry:
    """`registry` with 100 more tools: BFCL's functions (real tools' names, descriptions and
    schemas from many domains), made commands the way an MCP server's tools are (`schema_tool`)."""
    functions: dict[str, dict[str, Any]] = {}
    for name in ("simple_python", "live_simple", "multiple"):
        for line in (BFCL / f"BFCL_v4_{name}.json").read_text(encoding="utf-8").splitlines():
            for function in json.loads(line)["function"]:
                functions.setdefault(function["name"], function)
    chosen = tuple(list(functions.values())[:100])
    assert len(chosen) == 100
    for tool in function_registry(chosen, "ok").commands():
        registry.register(tool)
    return registry


def no_images(message: Message) -> tuple[str, ...]:
    return ()


def test_a_hundred_more_tools_cut_the_list_and_keep_the_needed_command_in_it() -> None:
    registry = hundred_more(build_registry())
    book = PromptBook(registry)
    assert len(offered(registry, EVERYTHING)) > 100
    cases = [case for case in load_cases(OUR_CASES) if case.expect is not None and case.expect.command]
    found = 0
    for case in cases:
        asked = next(content for role, content in reversed(case.messages) if role == "user")
        listing = book.listing(EVERYTHING, asked, 30)
        assert listing.cut and len(listing.tools) == CUT_LIST and listing.message is not None
        assert listing.message.role == "system" and listing.message.content.startswith(LISTED_HEADING)
        found += case.expect is not None and case.expect.command in listing.names
    assert found / len(cases) >= 0.95, f"{found} of {len(cases)}"
    system = book.system_prompt(EVERYTHING, demos=True, cut=True)
    assert LISTED_NOTE in system and "- /weather" not in system and "Example: /" not in system


def test_up_to_prompt_commands_the_system_prompt_lists_them_all() -> None:
    book = PromptBook(build_registry())
    listing = book.listing(EVERYTHING, "weather in Oslo", 30)
    assert not listing.cut and listing.message is None
    assert listing.names == [tool.command.name for tool in offered(book.registry, EVERYTHING) if tool.command]
    assert book.candidates(EVERYTHING, listing, "weather in Oslo", 3)[0] == "weather"


def test_the_list_goes_just_before_the_users_message_after_a_prefix_that_does_not_change() -> None:
    book = PromptBook(hundred_more(build_registry()))
    history = [
        Message(1, 1, USER, "Hello there", ""),
        Message(2, 1, ASSISTANT, "Hi! How can I help?", ""),
    ]

    def context(asked: str) -> list[Any]:
        listing = book.listing(EVERYTHING, asked, 30)
        return build_context(
            book.system_prompt(EVERYTHING, demos=True, cut=True),
            [*history, Message(3, 1, USER, asked, "")],
            followup_turns=0,
            load_images=no_images,
            demos=book.demonstrations(EVERYTHING),
            listing=listing.message,
        )

    weather, sql = context("Is it raining in Lyon?"), context("Run this SQL on my memories")
    assert [m.role for m in weather[-4:]] == ["user", "assistant", "system", "user"]
    assert weather[-2].content.startswith(LISTED_HEADING) and "/weather" in weather[-2].content
    assert weather[-1].content == "Is it raining in Lyon?"
    assert weather[:-2] == sql[:-2]  # everything before the list is the same: a prefix cache holds it
    assert weather[-2] != sql[-2]
    # a turn with no history before its message: the list joins the system prompt (roles alternate)
    alone = build_context(
        "SYSTEM", [Message(1, 1, USER, "hi", "")], followup_turns=0, load_images=no_images, listing=weather[-2]
    )
    assert [m.role for m in alone] == ["system", "user"] and alone[0].content.endswith(weather[-2].content)


def test_a_turn_past_prompt_commands_lists_the_best_and_runs_the_command(
    make_app: Any, fake_llm: FakeLLMServer
) -> None:
    app = make_app(llm_base_url=fake_llm.openai_base_url, prompt_commands=5, llm_decide="greedy", prompt_demos=0)
    client = app.test_client()
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    fake_llm.queue("/weather Oslo", "It is cold in Oslo.", "Paris.")
    answer = client.post("/chat", json={"message": "What is the weather in Oslo?"}, headers=auth)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    session = answer.get_json()["session_id"]
    first, second = fake_llm.requests[0]["messages"], fake_llm.requests[1]["messages"]
    # nothing before the user's message yet: the list joins the system prompt (roles alternate)
    system, listed = first[0]["content"].split(f"\n\n{LISTED_HEADING}\n")
    assert LISTED_NOTE in system and "- /remember" not in system and "/weather" in listed
    assert [m["role"] for m in first] == ["system", "user"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]  # the result after the list
    assert second[0] == first[0] and second[2]["content"].startswith("/weather")
    assert answer.get_json()["reply"] == "It is cold in Oslo."
    again = client.post("/chat", json={"message": "capital of France?", "session_id": session}, headers=auth)
    assert again.status_code == 200
    third = fake_llm.requests[2]["messages"]
    assert third[0]["content"] == system  # the same system prompt whatever the words
    assert third[-1]["content"] == "capital of France?" and third[-2]["role"] == "system"
    assert third[-2]["content"].startswith(LISTED_HEADING)
    assert not any(LISTED_HEADING in m["content"] for m in third[1:-2])  # never kept in the history
