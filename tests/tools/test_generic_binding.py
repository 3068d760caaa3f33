"""The generic binding (SPEC 5): tools known only by a JSON schema, called as `/commands`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from commands.detect import detect_command
from commands.router import route
from tests.store_support import TwoUserStore
from tools.base import ErrorCode, ToolContext
from tools.generic import TextOutput, command_name, generic_binding, schema_tool
from tools.registry import ToolRegistry

TIME_SCHEMA = {
    "type": "object",
    "properties": {
        "timezone": {
            "type": "string",
            "description": "IANA timezone name (e.g., 'America/New_York', 'Europe/London').",
        }
    },
    "required": ["timezone"],
}
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}


def echo(arguments: dict[str, Any], ctx: ToolContext) -> TextOutput:
    return TextOutput(text=json.dumps(arguments, sort_keys=True), data=arguments)


@pytest.fixture
def registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(schema_tool("get_current_time", "The time in a zone.", TIME_SCHEMA, echo, result_role="x_tools"))
    registry.register(schema_tool("get_weather", "A forecast.", WEATHER_SCHEMA, echo, result_role="x_tools"))
    return registry


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[ToolContext]:
    world = TwoUserStore(tmp_path)
    yield ToolContext(conn=world.conn, database=world.database, settings=world.settings, user_id=world.alice)
    world.conn.close()


def run(reply: str, registry: ToolRegistry, ctx: ToolContext) -> Any:
    command = detect_command(reply)
    assert command is not None
    return route(command, registry, ctx).result


def test_one_required_string_takes_the_argument_text(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = run("/get_current_time Europe/Paris\nignored lines", registry, ctx)
    assert result.ok, result
    assert result.output["data"] == {"timezone": "Europe/Paris"}
    binding = registry.for_command("get_current_time").command
    assert binding is not None and not binding.takes_body  # the stream stops after the first line


def test_the_usage_and_example_come_from_the_schema() -> None:
    single = generic_binding("time_now", TIME_SCHEMA)
    assert (single.usage, single.example) == ("/time_now <timezone>", "/time_now America/New_York")
    several = generic_binding("get_weather", WEATHER_SCHEMA)
    assert several.usage == '/get_weather {"city": <string>, "days": <integer>, "unit"?: "celsius"|"fahrenheit"}'
    assert several.example == '/get_weather {"city": "city", "days": 1}'
    assert several.takes_body


@pytest.mark.parametrize(
    "reply",
    [
        '/get_weather {"city": "Paris", "days": 2}',
        '/get_weather\n{"city": "Paris", "days": 2}',
        '/get_weather\n```json\n{"city": "Paris",\n "days": 2}\n```',
    ],
)
def test_json_arguments_on_the_first_line_or_in_the_body(reply: str, registry: ToolRegistry, ctx: ToolContext) -> None:
    result = run(reply, registry, ctx)
    assert result.ok, result
    assert result.output["data"] == {"city": "Paris", "days": 2}


def test_a_wrong_call_names_each_bad_field_and_shows_the_shape(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = run('/get_weather {"days": "two", "colour": "red"}', registry, ctx)
    assert not result.ok and result.error_code == ErrorCode.VALIDATION_FAILED
    fields = {problem.field for problem in result.details}
    assert fields == {"city", "days", "colour"}
    assert "Usage: /get_weather {" in result.hint and "Example: /get_weather" in result.hint
    assert "'two' is not of type 'integer'" in result.message


def test_arguments_that_are_not_json_get_the_usage(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = run("/get_weather city=Paris", registry, ctx)
    assert not result.ok and result.error_code == ErrorCode.VALIDATION_FAILED
    assert "not one JSON object" in result.message and "Usage: /get_weather" in result.hint
    result = run("/get_weather [1, 2]", registry, ctx)
    assert "must be one JSON object" in result.message


def test_the_schema_is_published_unchanged(registry: ToolRegistry) -> None:
    tool = registry.get("get_weather")
    assert tool is not None
    assert tool.function_schema()["function"]["parameters"] == WEATHER_SCHEMA


@pytest.mark.parametrize(
    ("name", "prefix", "expected"),
    [
        ("get-current.Time", "time_", "time_get_current_time"),
        ("9lives", "", "t_9lives"),
        ("ÜberTool", "", "t__bertool"),
    ],
)
def test_command_names(name: str, prefix: str, expected: str) -> None:
    assert command_name(name, prefix) == expected


# mcp-server-git 2026.10.19's git_create_branch, as it lists it: an optional field is pydantic's anyOf
GIT_CREATE_BRANCH = {
    "properties": {
        "repo_path": {"title": "Repo Path", "type": "string"},
        "branch_name": {"title": "Branch Name", "type": "string"},
        "base_branch": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Base Branch"},
    },
    "required": ["repo_path", "branch_name"],
    "title": "create_branchArguments",
    "type": "object",
}


def test_an_optional_field_of_a_real_mcp_schema_shows_its_types() -> None:
    binding = generic_binding("git_create_branch", GIT_CREATE_BRANCH)
    assert (
        binding.usage
        == '/git_create_branch {"repo_path": <string>, "branch_name": <string>, "base_branch"?: <string|null>}'
    )
    assert binding.example == '/git_create_branch {"repo_path": "repo path", "branch_name": "branch name"}'
