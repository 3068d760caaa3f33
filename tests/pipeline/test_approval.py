"""The approval policy (SPEC 8, Approval): `TOOL_APPROVAL` parsed, and which calls ask first.

The verdicts are `pipeline/approval.decide`'s on real tool units with a real context: whether
`/memory_sql` asks is the SQLite engine's own reading of the statement (the app's SQL worker),
so the table runs against a migrated database. The same decision over 100+ statements on both
engines, through real turns, is `tests/hostile/test_approval_engines.py`."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from flask import Flask

from api.services import services_of
from commands.detect import Command, detect_command
from config.approval import parse_approval
from config.settings import ConfigError, load_settings
from mcp_client.tools import mcp_tool
from pipeline.approval import Verdict, decide, standing_rule
from pipeline.results import tool_context
from tools.base import ASKS, READ_ONLY_LOCAL, Tool, ToolContext, ToolHints
from tools.catalog import build_registry
from tools.generic import TextOutput
from tools.interactive import CONFIRM_TOOL

REGISTRY = build_registry()


def nothing(arguments: dict[str, Any], ctx: ToolContext) -> TextOutput:
    raise AssertionError("never called")


def srv_tool(name: str, hints: ToolHints | None) -> Tool[Any, Any]:
    """An MCP server's tool as the client registers it (None: the server said nothing)."""
    return mcp_tool(name, "an MCP tool", {"type": "object", "properties": {}}, nothing, hints or ToolHints())


READ_ONLY = srv_tool("srv_read", READ_ONLY_LOCAL)
DESTRUCTIVE = srv_tool("srv_delete", ToolHints(read_only=False, destructive=True))
WRITES_SAFELY = srv_tool("srv_append", ToolHints(read_only=False, destructive=False))
CONTRADICTS = srv_tool("srv_odd", ToolHints(read_only=True, destructive=True))
SILENT = srv_tool("srv_silent", None)


def builtin(name: str) -> Tool[Any, Any]:
    tool = REGISTRY.for_command(name)
    assert tool is not None, name
    return tool


def command(text: str) -> Command:
    parsed = detect_command(text)
    assert parsed is not None
    return parsed


SELECT = "/memory_sql SELECT content FROM memories WHERE content LIKE '%update%'"
UPDATE = "/memory_sql UPDATE memories SET importance = 5 WHERE id = 1"
UPDATE_IN_BODY = "/memory_sql\nWITH x AS (SELECT 1) UPDATE memories SET importance = 1"


@pytest.mark.parametrize(
    ("setting", "tool", "text", "asks"),
    [
        # the default
        ("default", "write_file", "/write_file notes.md\nhello", True),
        ("default", "edit_file", "/edit_file notes.md\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE", True),
        ("default", "read_file", "/read_file notes.md", False),
        ("default", "memory_sql", SELECT, False),
        ("default", "memory_sql", UPDATE, True),
        ("default", "memory_sql", UPDATE_IN_BODY, True),
        ("default", "run_code", "/run_code python\nprint(1)", False),
        ("default", READ_ONLY, "/srv_read {}", False),
        ("default", DESTRUCTIVE, "/srv_delete {}", True),
        ("default", WRITES_SAFELY, "/srv_append {}", True),  # not read-only
        ("default", CONTRADICTS, "/srv_odd {}", False),  # MCP: destructive means nothing for a read-only tool
        ("default", SILENT, "/srv_silent {}", True),  # MCP's cautious defaults
        ("default", CONFIRM_TOOL, "/confirm location Still Paris?", False),  # a question already
        # narrowed
        ("none", "write_file", "/write_file notes.md\nhello", False),
        ("none", "memory_sql", UPDATE, False),
        ("none", DESTRUCTIVE, "/srv_delete {}", False),
        ("default,-write_file", "write_file", "/write_file notes.md\nhello", False),
        ("default,-write_file", "edit_file", "/edit_file a\nb", True),
        ("default,-mcp", DESTRUCTIVE, "/srv_delete {}", False),
        ("default,-srv_delete", DESTRUCTIVE, "/srv_delete {}", False),
        ("default,-memory_sql:update", "memory_sql", UPDATE, False),
        ("write_file", "edit_file", "/edit_file a\nb", False),
        ("write_file", "write_file", "/write_file a\nb", True),
        # widened
        ("default,+run_code", "run_code", "/run_code python\nprint(1)", True),
        ("default,memory_sql", "memory_sql", SELECT, True),
        ("mcp:all", READ_ONLY, "/srv_read {}", True),
        ("default,+srv_read", READ_ONLY, "/srv_read {}", True),
        ("all", "read_file", "/read_file notes.md", True),
        ("all,-read_file", "read_file", "/read_file notes.md", False),
        ("all", CONFIRM_TOOL, "/confirm location Still Paris?", False),
        # later items win
        ("-write_file,+write_file", "write_file", "/write_file a\nb", True),
        ("default,-mcp,+mcp", SILENT, "/srv_silent {}", True),
    ],
)
def test_policy_table(app: Flask, setting: str, tool: str | Tool[Any, Any], text: str, asks: bool) -> None:
    unit = builtin(tool) if isinstance(tool, str) else tool
    assert verdict(app, unit, text, setting).kind == ("ask" if asks else "run")


def verdict(app: Flask, unit: Tool[Any, Any], text: str, setting: str) -> Verdict:
    turns = services_of(app).turns
    with turns.database.connection() as conn:
        return decide(unit, command(text), tool_context(turns, conn, user_id=1), parse_approval(setting))


@pytest.mark.parametrize(
    ("sql", "kind", "writes_allowed"),
    [
        ("SELECT * FROM memories", "run", False),
        ("select content from memories where content like '%UPDATE%'", "run", False),
        ('SELECT "update" FROM memories', "run", False),  # SQLite reads an unknown quoted name as a string
        ("SELECT 1 -- update later\n", "run", False),
        ("SELECT 1 /* update */", "run", False),
        ("SELECT 'it''s' AS a", "run", False),
        ("UPDATE memories SET importance = 2", "ask", True),
        ("  update memories set content = 'x'", "ask", True),
        ("WITH t AS (SELECT 1) UPDATE memories SET importance = 1", "ask", True),
        ("WITH a AS (SELECT $$--$$) UPDATE memories SET importance = 3 WHERE true", "refuse", True),  # SQLite syntax
        ("UPDATE messages SET content = 'x'", "refuse", True),  # never allowed: refused without asking
        ("DELETE FROM memories", "refuse", True),
        ("SELECT 'open", "refuse", True),
        ("SELECT 1 /* open", "run", False),  # SQLite ends an open block comment at the end of the text
    ],
)
def test_memory_sql_asks_when_its_engine_reads_a_write(app: Flask, sql: str, kind: str, writes_allowed: bool) -> None:
    found = verdict(app, builtin("memory_sql"), f"/memory_sql {sql}", "default")
    assert (found.kind, found.writes_allowed) == (kind, writes_allowed)
    if kind == "refuse":
        assert found.failure is not None and found.failure.code in ("PERMISSION_DENIED", "VALIDATION_FAILED")


def test_a_tool_that_asks_is_one_line_on_the_tool(app: Flask) -> None:
    quiet = builtin("read_file")
    asking = dataclasses.replace(quiet, approval=ASKS)
    assert verdict(app, quiet, "/read_file notes.md", "default").kind == "run"
    assert verdict(app, asking, "/read_file notes.md", "default").kind == "ask"
    assert standing_rule(asking, parse_approval("default")) == "always"
    assert standing_rule(asking, parse_approval("default,-read_file")) == "never"


@pytest.mark.parametrize(
    "value",
    ["default,+run code", "default,none", "write_file,all", "+none", "default,,x", "mcp:some", "-default:x", "a:b c"],
)
def test_a_bad_setting_stops_the_start_naming_it(value: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({"TOOL_APPROVAL": value}, None)
    assert "TOOL_APPROVAL" in str(error.value)


def test_unset_is_the_default() -> None:
    policy = load_settings({}, None).tool_approval
    assert policy == parse_approval("default")
    assert policy.declared and policy.mcp == "hints" and policy.commands == frozenset()
