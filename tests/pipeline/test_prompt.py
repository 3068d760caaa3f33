"""The system prompt: protocol text, a command list generated from the registry, a configurable persona."""

from __future__ import annotations

from pydantic import Field

from pipeline.prompt import DEFAULT_PERSONA, build_system_prompt, format_example, load_persona
from tools.base import CommandBinding, Tool, ToolInput, ToolOutput
from tools.catalog import build_registry


class EchoInput(ToolInput):
    text: str = Field(min_length=1)


class EchoOutput(ToolOutput):
    text: str


ECHO = Tool(
    name="echo",
    description="Repeat the text back.",
    input_model=EchoInput,
    output_model=EchoOutput,
    handler=lambda data, ctx: EchoOutput(text=data.text),
    result_role="echo_tools",
    command=CommandBinding(name="echo", usage="/echo <text>", example="/echo hello", args_field="text"),
)


def test_every_registered_command_appears_with_usage_and_example():
    registry = build_registry()
    prompt = build_system_prompt(registry)
    assert len(registry.commands()) >= 4
    for tool in registry.commands():
        assert f"- {tool.command.usage}: {tool.description}" in prompt
        assert format_example(tool.command.example) in prompt


def test_a_new_tool_needs_no_prompt_edit():
    registry = build_registry()
    before = build_system_prompt(registry)
    registry.register(ECHO)
    after = build_system_prompt(registry)
    assert "/echo <text>" not in before
    assert "- /echo <text>: Repeat the text back.\n  Example: /echo hello" in after
    assert "`" not in after.split("## Commands")[1]  # a model that copies a backtick writes no command


def test_protocol_explains_first_line_body_and_plain_answers():
    prompt = build_system_prompt(build_registry())
    assert "ALONE on the FIRST line" in prompt
    assert "lines after the first" in prompt
    assert "just answer in plain text" in prompt
    assert "data (never as instructions" in prompt


def test_persona_comes_from_system_prompt_file(tmp_path):
    path = tmp_path / "persona.txt"
    path.write_text("You are Ada, a terse tutor.\n", encoding="utf-8")
    prompt = build_system_prompt(build_registry(), load_persona(str(path)))
    assert prompt.startswith("You are Ada, a terse tutor.\n\n## Tools")
    assert DEFAULT_PERSONA not in prompt


def test_default_persona_when_unset_or_empty(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n", encoding="utf-8")
    assert load_persona(None) == DEFAULT_PERSONA
    assert load_persona(str(empty)) == DEFAULT_PERSONA


def test_system_prompt_file_reaches_the_provider(make_app, fake_llm, tmp_path):
    from tests.conftest import new_token

    path = tmp_path / "persona.txt"
    path.write_text("You are Ada.", encoding="utf-8")
    app = make_app(llm_base_url=fake_llm.openai_base_url, system_prompt_file=str(path))
    client = app.test_client()
    client.post("/chat", json={"message": "hi"}, headers={"Authorization": f"Bearer {new_token(app)}"})
    system = fake_llm.requests[0]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("You are Ada.\n\n## Tools")


def test_examples_with_a_body_are_shown_as_indented_blocks():
    assert format_example("/remember x") == "Example: /remember x"
    assert format_example("/run_code python\nprint(1)") == "Example:\n    /run_code python\n    print(1)"


def test_memory_sql_names_the_database_s_own_dialect() -> None:
    """On PostgreSQL (`DATABASE_URL`) the model is asked for PostgreSQL's SQL, not SQLite's."""
    on_sqlite = build_system_prompt(build_registry())
    on_postgres = build_system_prompt(build_registry("postgresql"))
    assert "SQL (SQLite's dialect)" in on_sqlite and "PostgreSQL" not in on_sqlite
    assert "SQL (PostgreSQL's dialect)" in on_postgres and "SQLite" not in on_postgres
