"""Which tools `/mcp` serves and what it says about them, from the registry alone (no server).

A tool added to the registry is served over `/mcp` unless it is an interactive widget or an
image tool (both live in a chat: a widget waits for the user, images are the session's):
forgetting its hints would silently hide it from MCP hosts. The hints are
consistent (a read-only tool destroys nothing), and a result keeps the runner's shapes.
"""

from __future__ import annotations

import pytest

from mcp_client.tools import RESULT_ROLE as RELAYED_ROLE
from mcp_server.listing import call_result, is_served, listed, served
from tools.base import Need, ToolHints, ToolResult
from tools.catalog import build_registry
from tools.generic import TextOutput, schema_tool

REGISTRY = list(build_registry())


@pytest.mark.parametrize("tool", REGISTRY, ids=lambda tool: tool.name)
def test_every_direct_tool_but_widgets_and_image_tools_is_served(tool) -> None:
    chat_only = tool.interactive or bool({Need.IMAGE, Need.IMAGE_PROVIDER} & tool.needs)
    assert (tool.annotations is None) is chat_only


@pytest.mark.parametrize("tool", served(REGISTRY), ids=lambda tool: tool.name)
def test_hints_are_consistent_and_listed_as_declared(tool) -> None:
    hints = tool.annotations
    if hints.read_only:
        assert not hints.destructive
    shown = listed(tool)
    assert shown.annotations.read_only_hint is hints.read_only
    assert shown.input_schema == tool.function_schema()["function"]["parameters"]  # what GET /tools says
    assert shown.output_schema["type"] == "object"  # MCP: an output schema describes an object


def test_results_keep_the_runners_shapes() -> None:
    ok = call_result(ToolResult(tool="t", ok=True, output={"a": 1}, text="a is 1"))
    assert ok.is_error is False and ok.structured_content == {"a": 1} and ok.content[0].text == "a is 1"
    failed = call_result(ToolResult.failure("t", "NOT_FOUND", "no such file", hint="Usage: /read_file <path>"))
    assert failed.is_error is True
    assert failed.structured_content is None  # {"error": …} would not match the tool's output schema
    assert [block.text for block in failed.content] == [
        "Error: NOT_FOUND: no such file",  # the model's chat hint stays in chat
        '{"error": {"code": "NOT_FOUND", "message": "no such file"}}',
    ]


def test_an_operators_mcp_tools_are_not_relayed_to_hosts() -> None:
    """A tool of an MCP server from MCP_SERVERS (`mcp_tools`) keeps its hints for approval
    (SPEC 8) but is not passed on over `/mcp`: hosts connect to that server themselves."""
    relayed = schema_tool(
        "get_current_time",
        "the time",
        {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
        lambda arguments, ctx: TextOutput(text="12:00"),
        result_role=RELAYED_ROLE,
        annotations=ToolHints(read_only=True, destructive=False),
    )
    assert relayed.annotations is not None and not is_served(relayed)
    assert served([*REGISTRY, relayed]) == served(REGISTRY)
