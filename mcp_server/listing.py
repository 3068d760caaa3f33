"""What `/mcp` says about a tool and about a call's outcome, derived from the tool, never by hand.

A tool is served when it declares its hints (`Tool.annotations`); interactive widgets and the
tools bound to a chat session's images declare none. Tools relayed from an operator's MCP
servers (`mcp_tools`) are not passed on: a host that wants them connects to those servers. Its input schema is its input model's,
the schema `GET /tools` gives; its output schema is its output model's, and a successful call
carries the output as `structuredContent`, which the host may check against it. The text
block is what the chat's contract block quotes: the tool's rendered output, or the
`Error: <code>: <message>` line.

A failure is a result with `isError` (so the host's model reads it and may retry) and no
`structuredContent`: the spec requires structured content to conform to the output schema,
and hosts built on the TypeScript SDK check it even on an error, so `{"error": …}` there
would make them throw instead of showing the error. Its content is two text blocks: the
`Error: <code>: <message>` line, then the JSON error body of the HTTP API
(`{"error": {"code", "message", "details"?}}`), for a program that wants the code and details.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import mcp_types as types

from mcp_client.tools import RESULT_ROLE as RELAYED_ROLE
from tools.base import Tool, ToolHints, ToolResult


def is_served(tool: Tool[Any, Any]) -> bool:
    """Whether `/mcp` lists and calls this tool (see the module's docstring)."""
    return tool.annotations is not None and tool.result_role != RELAYED_ROLE


def served(tools: Iterable[Tool[Any, Any]]) -> list[Tool[Any, Any]]:
    """The tools `/mcp` lists and calls, in the registry's order."""
    return [tool for tool in tools if is_served(tool)]


def hints_of(hints: ToolHints) -> types.ToolAnnotations:
    return types.ToolAnnotations(
        read_only_hint=hints.read_only,
        destructive_hint=hints.destructive,
        idempotent_hint=hints.idempotent,
        open_world_hint=hints.open_world,
    )


def listed(tool: Tool[Any, Any]) -> types.Tool:
    """The tool as `tools/list` shows it."""
    assert tool.annotations is not None, "only served tools are listed"
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_model.model_json_schema(),
        output_schema=tool.output_model.model_json_schema(mode="serialization"),
        annotations=hints_of(tool.annotations),
    )


def error_result(code: str, message: str, details: Any = None) -> types.CallToolResult:
    """A refused or failed call: `isError`, the error line and the error body as text, no
    `structuredContent` (the module's docstring says why)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        error["details"] = details
    body = json.dumps({"error": error}, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(text=f"Error: {code}: {message}"), types.TextContent(text=body)], is_error=True
    )


def call_result(result: ToolResult) -> types.CallToolResult:
    """A call's outcome, already within SPEC 12's caps (the runner bounded it)."""
    if result.ok:
        return types.CallToolResult(content=[types.TextContent(text=result.text)], structured_content=result.output)
    details = None if result.details is None else [problem.model_dump() for problem in result.details]
    return error_result(result.error_code or "INTERNAL_ERROR", result.message, details)
