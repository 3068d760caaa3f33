"""An MCP server's tools as `Tool` units: the generic binding (SPEC 5), result role `mcp_tools`.

A tool's command is the server's prefix and the tool's name (`tools.generic.command_name`:
lower-cased, `[a-z0-9_]` only), its input model the server's `inputSchema` itself (checked
before the call), its description the server's, cut to `MAX_DESCRIPTION_CHARS` (it goes
into every system prompt). A tool whose schema is not a valid JSON Schema, or larger than
`MAX_SCHEMA_BYTES`, is left out with a warning; so are tools past `MAX_TOOLS` of one server.

A call runs on the turn's worker thread and waits on the hub's loop (`call`): the time left
before the tool's deadline bounds the wait for a session and the request itself (when it
runs out the SDK tells the server: `notifications/cancelled` over 2025-11-25, the request
closed over 2026-07-28); the turn's cancel token cancels the waiting task at once (the
server is told the same way) and the call ends `CANCELLED`. Progress notifications reach `ToolContext.report_progress`, at most one every
`PROGRESS_EVERY_S` and `MAX_PROGRESS_EVENTS` a call.

Faults cost one fast, honest failure: while the server is known down the call fails at once,
"unavailable (reconnecting in N s)" (`outage.py`), or makes the one early try a back-off
allows; a session the server expired (HTTP 404) is made again once and the call sent once
more; an answer that comes after the deadline is dropped unread (`http.py`).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import jsonschema
import mcp_types as types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from foundation.cancellation import Cancelled
from mcp_client.config import prefix_of
from mcp_client.connection import ServerConnection, describe
from mcp_client.http import CALL_DEADLINE
from mcp_client.outage import Unavailable
from mcp_client.results import McpOutput, as_output
from storage.roles import MCP_TOOLS
from tools.base import ASKS, NEVER_ASKS, Approval, ErrorCode, Tool, ToolContext, ToolFailure, ToolHints
from tools.generic import TextOutput, command_name, schema_tool

log = logging.getLogger("mcp")

RESULT_ROLE = MCP_TOOLS
MAX_TOOLS = 64
MAX_DESCRIPTION_CHARS = 600
MAX_SCHEMA_BYTES = 64 * 1024
PROGRESS_EVERY_S = 0.2
MAX_PROGRESS_EVENTS = 100
MAX_PROGRESS_MESSAGE = 200
Submit = Callable[[Coroutine[Any, Any, types.CallToolResult]], "concurrent.futures.Future[types.CallToolResult]"]
LATE_S = 2.0  # after the deadline, the SDK's own timeout answers first; this is the backstop


def annotations_of(tool: types.Tool) -> ToolHints:
    """The server's hints; a hint it did not give takes MCP's cautious default (`ToolHints`'s),
    so a tool that says nothing counts as one that may change and destroy things (SPEC 8)."""
    hints = tool.annotations
    if hints is None:
        return ToolHints()
    cautious = ToolHints()
    return ToolHints(
        read_only=cautious.read_only if hints.read_only_hint is None else hints.read_only_hint,
        destructive=cautious.destructive if hints.destructive_hint is None else hints.destructive_hint,
        idempotent=cautious.idempotent if hints.idempotent_hint is None else hints.idempotent_hint,
        open_world=cautious.open_world if hints.open_world_hint is None else hints.open_world_hint,
    )


def approval_of(hints: ToolHints) -> Approval:
    """What an MCP tool declares about asking first (SPEC 8): a tool that may change things asks;
    one annotated read-only does not (MCP gives the destructive hint a meaning only for a tool
    that is not read-only, so read-only wins). `TOOL_APPROVAL`'s `mcp` counts these
    declarations; `mcp:all` asks for every MCP tool whatever it declares."""
    return NEVER_ASKS if hints.read_only else ASKS


def mcp_tool(
    name: str,
    description: str,
    schema: dict[str, Any],
    call: Callable[[dict[str, Any], ToolContext], TextOutput],
    hints: ToolHints,
    *,
    timeout_s: float = 30.0,
) -> Tool[Any, Any]:
    """One MCP server's tool as a `Tool` unit: the generic binding of its schema, role
    `mcp_tools`, origin `mcp`, the server's hints, and whether it asks first as they declare."""
    return schema_tool(
        name,
        description,
        schema,
        call,
        result_role=RESULT_ROLE,
        command=name,
        timeout_s=timeout_s,
        budget="tools",
        output_model=McpOutput,
        annotations=hints,
        approval=approval_of(hints),
        origin="mcp",
    )


def build_tools(submit: Submit, connection: ServerConnection, listed: list[types.Tool]) -> list[Tool[Any, Any]]:
    """The registry's tools for one server's listing (its allow-list applied)."""
    config = connection.config
    allowed = None if config.allow is None else set(config.allow)
    prefix = prefix_of(connection.key, config)
    built: list[Tool[Any, Any]] = []
    for listed_tool in listed:
        if allowed is not None and listed_tool.name not in allowed:
            continue
        if len(built) >= MAX_TOOLS:
            log.warning("MCP server %s: more than %d tools; the rest are left out", connection.key, MAX_TOOLS)
            break
        schema = listed_tool.input_schema
        if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
            log.warning("MCP server %s: tool %s has a schema over 64 KiB; left out", connection.key, listed_tool.name)
            continue
        description = " ".join((listed_tool.description or listed_tool.title or listed_tool.name).split())
        if len(description) > MAX_DESCRIPTION_CHARS:
            description = description[: MAX_DESCRIPTION_CHARS - 1] + "…"
        name = command_name(listed_tool.name, prefix)
        try:
            built.append(
                mcp_tool(
                    name,
                    description,
                    schema,
                    caller(submit, connection, listed_tool.name),
                    annotations_of(listed_tool),
                    timeout_s=config.timeout_s,
                )
            )
        except jsonschema.SchemaError as error:
            log.warning(
                "MCP server %s: tool %s has an invalid schema (%s); left out",
                connection.key,
                listed_tool.name,
                error.message[:200],
            )
    return built


def caller(submit: Submit, connection: ServerConnection, tool_name: str) -> Any:
    def call_it(arguments: dict[str, Any], ctx: ToolContext) -> TextOutput:
        return as_output(call(submit, connection, tool_name, arguments, ctx), ctx)

    return call_it


class _Progress:
    """Forwards a call's progress notifications to its context, throttled (loop thread)."""

    def __init__(self, ctx: ToolContext) -> None:
        self.ctx, self.sent, self.last = ctx, 0, 0.0

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        now = time.monotonic()
        if self.sent >= MAX_PROGRESS_EVENTS or now - self.last < PROGRESS_EVERY_S:
            return
        self.sent, self.last = self.sent + 1, now
        text = None if message is None else message[:MAX_PROGRESS_MESSAGE]
        try:
            self.ctx.report_progress(progress, total, text)
        except Exception:  # a sink that fails never fails the call
            log.exception("progress sink failed")


def call(
    submit: Submit, connection: ServerConnection, tool_name: str, arguments: dict[str, Any], ctx: ToolContext
) -> types.CallToolResult:
    """Call one tool from a worker thread; `ToolFailure` or `Cancelled` when it does not answer."""
    budget = ctx.remaining()
    progress = _Progress(ctx)

    async def request() -> types.CallToolResult:
        deadline = anyio.current_time() + budget
        session = await connection.wait_session(budget)
        try:
            return await call_once(session, tool_name, arguments, deadline, progress)
        except MCPError:
            if not connection.expired(session):
                raise
        # the server expired our session (HTTP 404): one new session, the call once again
        renewed = await connection.renew(session, deadline - anyio.current_time())
        return await call_once(renewed, tool_name, arguments, deadline, progress)

    future = submit(request())

    def stop() -> None:
        future.cancel()  # the task on the loop is cancelled: the SDK sends notifications/cancelled

    remove = ctx.cancel.on_cancel(stop)
    try:
        return future.result(timeout=budget + LATE_S)
    except concurrent.futures.CancelledError:
        raise Cancelled("stopped by the user") from None
    except Unavailable as error:
        raise ToolFailure(ErrorCode.UPSTREAM_ERROR, f"{error}; try again later.") from None
    except (concurrent.futures.TimeoutError, TimeoutError):
        future.cancel()
        raise ToolFailure(ErrorCode.TIMEOUT, f"the MCP server {connection.key} did not answer in time.") from None
    except MCPError as error:
        raise failure_of(connection, error) from None
    except (ValidationError, ValueError, RuntimeError) as error:
        raise ToolFailure(
            ErrorCode.UPSTREAM_ERROR,
            f"the MCP server {connection.key} answered something unreadable: {describe(error)[:300]}",
        ) from None
    finally:
        remove()


async def call_once(
    session: ClientSession, tool_name: str, arguments: dict[str, Any], deadline: float, progress: _Progress
) -> types.CallToolResult:
    """One `tools/call` within the deadline; its answer is read only until then (`http.py`)."""
    token = CALL_DEADLINE.set(deadline)
    try:
        left = max(0.05, deadline - anyio.current_time())
        result = await session.call_tool(tool_name, arguments, read_timeout_seconds=left, progress_callback=progress)
    finally:
        CALL_DEADLINE.reset(token)
    assert isinstance(result, types.CallToolResult)
    return result


def failure_of(connection: ServerConnection, error: MCPError) -> ToolFailure:
    """An MCP error response as a tool failure: a timeout, a server gone, or the server's words."""
    if error.code == types.REQUEST_TIMEOUT:
        return ToolFailure(ErrorCode.TIMEOUT, f"the MCP server {connection.key} did not answer in time.")
    if error.code == types.CONNECTION_CLOSED:
        return ToolFailure(
            ErrorCode.UPSTREAM_ERROR,
            f"the MCP server {connection.key} did not finish its answer ({error.message[:300]}); try again.",
        )
    if error.code == types.INVALID_PARAMS:
        return ToolFailure(
            ErrorCode.VALIDATION_FAILED, f"the MCP server {connection.key} refused the arguments: {error.message[:500]}"
        )
    return ToolFailure(ErrorCode.UPSTREAM_ERROR, f"the MCP server {connection.key} failed: {error.message[:500]}")
