"""Tools that join and leave the registry at run time as a group (an MCP server's, SPEC 14)."""

from __future__ import annotations

import json
from typing import Any

from pipeline.prompt import PromptBook
from tools.base import ToolContext
from tools.catalog import build_registry
from tools.generic import TextOutput, schema_tool

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def echo(arguments: dict[str, Any], ctx: ToolContext) -> TextOutput:
    return TextOutput(text=json.dumps(arguments))


def tool(name: str) -> Any:
    return schema_tool(name, f"The {name} tool.", SCHEMA, echo, result_role="mcp_tools")


def test_a_group_is_replaced_whole_and_never_takes_a_built_in_name() -> None:
    registry = build_registry()
    built_in = registry.get("weather")
    refused = registry.replace_group("mcp:a", [tool("a_one"), tool("a_two"), tool("weather")])
    assert refused == ["weather"] and registry.get("weather") is built_in
    assert [t.name for t in registry.group("mcp:a")] == ["a_one", "a_two"]
    version = registry.version
    registry.replace_group("mcp:a", [tool("a_three")])
    assert registry.get("a_one") is None and registry.for_command("a_three") is not None
    assert registry.version > version
    assert registry.replace_group("mcp:b", [tool("a_three")]) == ["a_three"]  # another group's name


def test_built_prompts_follow_the_registry() -> None:
    registry = build_registry()
    book = PromptBook(registry)
    before = book.system_prompt()
    registry.replace_group("mcp:a", [tool("a_one")])
    assert "/a_one <text>" not in before and "/a_one <text>" in book.system_prompt()
    assert "cmd-a-one" in book.grammar()
    registry.replace_group("mcp:a", [])
    assert "/a_one" not in book.system_prompt() and "cmd-a-one" not in book.grammar()
