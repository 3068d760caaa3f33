"""`GET /tools` (function schemas from the input models) and `POST /tools/<name>` (direct calls).

A direct call goes through the same runner as a chat command: same validation, same
user scoping, same error codes. Only the transport differs: the output model as JSON, or
an HTTP error whose status follows the tool's error code. What a direct call costs is the
tool's own `Tool.budget`, and `GET /openapi.json` documents it as one operation per tool,
built from the tool's models. `/mcp`'s `tools/call` (`mcp_server/`) runs the same `direct_call`
and spends the same `Tool.budget`: one code path, two transports.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from api.auth import current_user, require_user
from api.bodies import json_object
from api.database import get_db
from api.declare import Reply, budget, one_operation_per_tool, operation
from api.errors import ApiError, busy
from api.openapi.models import FunctionList
from api.services import services
from pipeline.results import TurnServices, tool_context
from tools.base import ErrorCode, Tool, ToolResult
from tools.runner import run_tool

bp = Blueprint("tools", __name__)
bp.before_request(require_user)

STATUS_BY_CODE: dict[str, int] = {
    ErrorCode.VALIDATION_FAILED: 400,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNKNOWN_COMMAND: 404,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.UPSTREAM_ERROR: 502,
    ErrorCode.NOT_CONFIGURED: 503,
    ErrorCode.INTERNAL_ERROR: 500,
    ErrorCode.INVALID_STATE: 409,
    ErrorCode.BLOCKED: 409,
    ErrorCode.UNKNOWN_TOOL: 404,
    ErrorCode.BUSY: 503,  # with Retry-After (`api.errors.busy`)
}


def turn_services() -> TurnServices:
    return services().turns


def tool_budget(name: str) -> str | None:
    """The budget a direct call of tool `name` spends: the tool's own (none for an unknown tool)."""
    tool = turn_services().registry.get(name)
    return None if tool is None else tool.budget


def direct_call(tool: Tool[Any, Any], body: dict[str, Any], user_id: int) -> ToolResult:
    """One direct call of `tool` by user `user_id`, its budget already spent: validation, the
    user's scope, fair shares and result caps are the runner's, whoever asks (HTTP or `/mcp`)."""
    return run_tool(tool, body, tool_context(turn_services(), get_db(), user_id))


@bp.get("/tools")
@operation("Every tool's OpenAI-compatible function schema", replies={200: Reply("the schemas", FunctionList)})
def index() -> ResponseReturnValue:
    return jsonify({"tools": turn_services().registry.function_schemas()})


@bp.post("/tools/<name>")
@one_operation_per_tool
@budget(tool_budget)
def call(name: str) -> ResponseReturnValue:
    tool = turn_services().registry.get(name)
    if tool is None:
        raise ApiError(404, "not_found", f"tool {name!r} not found; GET /tools lists them")
    body = json_object(hint=": the tool's input")
    result = direct_call(tool, body, current_user().id)
    if not result.ok:
        code = result.error_code or ErrorCode.INTERNAL_ERROR
        status = STATUS_BY_CODE.get(code, 500)
        if tool.error_style == "task":  # SPEC section 10's error shape
            answer = jsonify({"success": False, "error_code": code, "message": result.message})
            return answer, status, busy(result.message).headers if code == ErrorCode.BUSY else {}
        if code == ErrorCode.BUSY:
            raise busy(result.message)  # SPEC 12: 503 with Retry-After, never 500
        details = None if result.details is None else [problem.model_dump() for problem in result.details]
        raise ApiError(status, code, result.message, details)  # the person's message; the model's hint stays in chat
    return jsonify(result.output)
