"""The blocking half of `/mcp`'s resources, prompts and completions: one request of one user,
on a call thread, inside the Flask app's context, its budget spent first.

Each spends the `tools` budget of `RATE_LIMITS`, what `read_file` and `list_files` spend over
`POST /tools/<name>` and `/mcp`'s `tools/call`: reading a file as a resource costs what reading
it as a tool does, so a host cannot read past a user's budget by switching methods. Over it, or
when a dependency (the database) fails, the answer is a `Problem` value with the HTTP API's
code; `as_error` makes any `Problem` the JSON-RPC error a host receives, the code in `data`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import mcp_types as types
from flask import Flask
from mcp.shared.exceptions import MCPError

from api.database import get_db
from api.errors import dependency_refusal
from api.refusal import refusal_body
from api.services import services
from mcp_server.resources import Problem
from pipeline.results import tool_context
from tools.base import ErrorCode, ToolContext, ToolFailure

T = TypeVar("T")
BUDGET = "tools"
log = logging.getLogger("mcp_server")
#: the JSON-RPC code of a problem: the request's own fault (SEP-2164 puts "no such resource"
#: here too) or the server's state (-32000, the first server-defined code)
CALLER_FAULTS = frozenset({ErrorCode.NOT_FOUND, ErrorCode.VALIDATION_FAILED, ErrorCode.PERMISSION_DENIED})
SERVER_STATE = -32000


def serve(app: Flask, user_id: int, work: Callable[[ToolContext], T | Problem]) -> T | Problem:
    """`work` for user `user_id`, after spending the budget (see the module's docstring)."""
    with app.app_context():
        found = services()
        try:
            verdict = found.rate_limiter.hit(BUDGET, str(user_id))
            if not verdict.allowed:
                found.telemetry.rate_limited(verdict.limit)
                error: dict[str, Any] = refusal_body(verdict)["error"]  # type: ignore[assignment]
                return Problem("rate_limited", error["message"], error["details"])
            return work(tool_context(found.turns, get_db(), user_id))
        except ToolFailure as failure:  # the workspace itself is unusable
            return Problem(failure.code, failure.message)
        except Exception as failure:
            refusal = dependency_refusal(failure)
            if refusal is None:
                raise
            log.warning("MCP read refused: %s", failure)
            return Problem(refusal.code, refusal.message)


def as_error(problem: Problem) -> MCPError:
    """The JSON-RPC error for `problem`: its message, and `data` with its code and details."""
    code = types.INVALID_PARAMS if problem.code in CALLER_FAULTS else SERVER_STATE
    return MCPError(code, problem.message, {"code": str(problem.code), **problem.details})


def answered(outcome: T | Problem) -> T:
    """The result, or the error raised for the SDK to send."""
    if isinstance(outcome, Problem):
        raise as_error(outcome)
    return outcome
