"""The first-line grammar (SPEC 7a.1, `LLM_GRAMMAR=first_line`): what it allows, who gets it,
and, against the real llama.cpp server, that every command a model writes under it is
well-formed and names a command of the turn's list."""

from __future__ import annotations

from typing import Any

import pytest

from commands.detect import detect_command
from commands.grammar import first_line_grammar, rule_name
from llm.base import ChatMessage, ProviderConfig
from pipeline.catalog import Reach, offered
from providers import build_provider
from testing.fake_llm import FakeLLMServer
from tests.conftest import new_token
from tests.llama_support import LlamaServer
from tools.catalog import build_registry

NONE = Reach.of(judge=False, image_provider=False, image=False, course=False)


def test_the_grammar_names_exactly_the_turns_commands() -> None:
    catalog = offered(build_registry(), NONE)
    grammar = first_line_grammar(catalog)
    for tool in catalog:
        binding = tool.command
        assert binding is not None
        rule = f'{rule_name(binding.name)} ::= "{binding.name}" args?' + (" body?" if binding.takes_body else "")
        assert rule + "\n" in grammar
    assert "run_code" not in grammar and "image_analyze" not in grammar  # not offered here
    assert grammar.startswith("root ::= command | prose\n")


def test_with_no_command_only_text_is_allowed() -> None:
    assert first_line_grammar([]).startswith("root ::= prose\n")


# --------------------------------------------------------------------------- who gets it


def test_an_openai_compatible_server_gets_it_the_others_never(fake_llm: FakeLLMServer) -> None:
    fake_llm.queue("a", "b")
    for kind, base in (("openai", fake_llm.openai_base_url), ("ollama", fake_llm.ollama_base_url)):
        provider = build_provider(ProviderConfig(provider=kind, base_url=base, model="m"))
        assert provider.call([ChatMessage(role="user", content="hi")], grammar="root ::= prose").ok
    openai_body, ollama_body = fake_llm.requests[-2], fake_llm.requests[-1]
    assert openai_body["grammar"] == "root ::= prose"
    assert "grammar" not in ollama_body and "tools" not in openai_body


@pytest.mark.parametrize(("setting", "sent"), [("first_line", True), ("off", False)])
def test_a_pass_that_may_use_a_command_carries_it_the_last_pass_not(
    make_app: Any, fake_llm: FakeLLMServer, setting: str, sent: bool
) -> None:
    app = make_app(llm_base_url=fake_llm.openai_base_url, llm_grammar=setting)
    fake_llm.queue("/remember I like tea", "Noted.")
    answer = app.test_client().post(
        "/chat", json={"message": "remember that I like tea"}, headers={"Authorization": f"Bearer {new_token(app)}"}
    )
    assert answer.status_code == 200
    first, last = fake_llm.requests[-2], fake_llm.requests[-1]
    assert ("grammar" in first) is sent
    assert "grammar" not in last  # MAX_TOOL_ROUNDS=1: the second pass may not use a command
    if sent:
        assert '"remember"' in first["grammar"] and '"run_code"' not in first["grammar"]


# --------------------------------------------------------------------------- the real model

# Conversations in which a small model copies what came before: the echo of a misspelt
# command, a command in backticks, an unknown command, a body-less command followed by more lines.
ECHOES = [
    ["/weathr Paris", "/weathr London", "/weathr Rome"],
    ["`/remember tea`", "`/remember milk`", "`/remember jam`"],
    ["/fly_to_moon now", "/fly_to_moon today", "/fly_to_moon soon"],
    ["/weather Paris\nand more", "/weather Oslo\nand more", "/weather Rome\nand more"],
    ["Hello!", "Hi there!", "How are you today?"],
]


def echo_conversation(lines: list[str]) -> list[ChatMessage]:
    messages = [ChatMessage(role="system", content="You repeat the user's message exactly, nothing else.")]
    for line in lines[:-1]:
        messages += [ChatMessage(role="user", content=line), ChatMessage(role="assistant", content=line)]
    return messages + [ChatMessage(role="user", content=lines[-1])]


def well_formed(text: str, names: set[str]) -> bool:
    """Text that is an answer (no `/` first), or a command of the list whose body-less form
    ends with its line."""
    command = detect_command(text)
    if command is None:
        return not text.lstrip(" \t").startswith("/")
    binding = build_registry().for_command(command.name)
    if command.name not in names or binding is None or binding.command is None:
        return False
    return binding.command.takes_body or "\n" not in text.strip()


def real_provider(llama_server: LlamaServer) -> Any:
    config = ProviderConfig(provider="openai", base_url=llama_server.base_url, model=llama_server.model, max_tokens=32)
    return build_provider(config)


@pytest.mark.llm
@pytest.mark.slow
@pytest.mark.parametrize("lines", ECHOES, ids=[lines[-1][:16] for lines in ECHOES])
def test_under_the_grammar_every_command_is_well_formed_and_registered(
    llama_server: LlamaServer, lines: list[str]
) -> None:
    """Whatever the conversation pulls towards, a reply is a command of the list or text (the
    shape the grammar guarantees; what a 135M model chooses is never asserted)."""
    catalog = offered(build_registry(), NONE)
    names = {tool.command.name for tool in catalog if tool.command}
    result = real_provider(llama_server).call(echo_conversation(lines), grammar=first_line_grammar(catalog))
    assert result.text is not None, result
    assert well_formed(result.text, names), result.text


@pytest.mark.llm
@pytest.mark.slow
def test_without_the_grammar_the_same_model_writes_commands_we_cannot_run(llama_server: LlamaServer) -> None:
    """The control: the conversations above do pull this model into malformed or unknown
    commands when nothing constrains it, so the test above has something to prevent."""
    names = {tool.command.name for tool in offered(build_registry(), NONE) if tool.command}
    provider = real_provider(llama_server)
    replies = [provider.call(echo_conversation(lines)).text or "" for lines in ECHOES[:3]]
    assert not all(well_formed(reply, names) for reply in replies), replies
