"""Run one tool call: validate input, call the handler, turn every outcome into a value.

This is the single place where tool failures are caught. Chat commands (via
`commands/router.py`) and `POST /tools/<name>` both come through here, so validation,
scoping and error codes are identical on both paths, and so is the size of what comes
back: every result, success or failure, leaves through `tools.result_caps.bounded`
(SPEC 12), whatever the tool and however much it returned.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from pydantic import ValidationError

from foundation.cancellation import Cancelled
from foundation.fair_share import Busy
from tools.base import FIX_HINT, ErrorCode, FieldProblem, Tool, ToolContext, ToolFailure, ToolResult
from tools.result_caps import bounded

log = logging.getLogger("tools")

MAX_PROBLEMS = 20  # a body of 10,000 unknown keys is one answer, not 10,000 lines
MAX_FIELD_CHARS = 100  # a field name comes from the caller (an unknown key) and may be huge


def field_problems(error: ValidationError) -> list[FieldProblem]:
    """The invalid fields, named as the caller wrote them (cut to a readable length)."""
    problems = []
    for item in error.errors()[:MAX_PROBLEMS]:
        field = ".".join(str(part) for part in item["loc"]) or "input"
        if len(field) > MAX_FIELD_CHARS:
            field = field[:MAX_FIELD_CHARS] + "…"
        problems.append(FieldProblem(field=field, message=item["msg"]))
    return problems


def describe_validation_error(error: ValidationError) -> str:
    """One clause per problem: `field: what is wrong`."""
    return "; ".join(f"{problem.field}: {problem.message}" for problem in field_problems(error))


def usage_hint(tool: Tool[Any, Any]) -> str:
    """How the model writes this command (chat only; an HTTP caller has `GET /tools`)."""
    if tool.command is None:
        return FIX_HINT
    return f"Usage: {tool.command.usage}. Example: {tool.command.example}. {FIX_HINT}"


def run_tool(tool: Tool[Any, Any], raw_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Validate `raw_input` with the tool's input model and run it; never raises, and the
    result is within the caps of SPEC 12; an `execute_tool` span and a count by outcome (SPEC 16)."""
    if ctx.telemetry is None:
        return bounded(_run(tool, raw_input, ctx))
    with ctx.telemetry.tool(tool.name, lambda: raw_input) as observed:
        result = bounded(_run(tool, raw_input, ctx))
        observed.finish(result)
    return result


def _run(tool: Tool[Any, Any], raw_input: dict[str, Any], ctx: ToolContext) -> ToolResult:
    started = time.perf_counter()

    def elapsed() -> float:
        return round((time.perf_counter() - started) * 1000, 3)

    try:
        data = tool.input_model.model_validate(raw_input)
    except ValidationError as error:
        message = f"invalid arguments for {tool.name}: {describe_validation_error(error)}."
        return ToolResult.failure(
            tool.name,
            ErrorCode.VALIDATION_FAILED,
            message,
            elapsed(),
            hint=usage_hint(tool),
            details=field_problems(error),
        )
    ctx = dataclasses.replace(ctx, deadline=time.monotonic() + tool.timeout_s)
    try:
        output = tool.handler(data, ctx)
    except ToolFailure as failure:
        return ToolResult.failure(tool.name, failure.code, failure.message, elapsed(), hint=failure.hint)
    except Cancelled:
        return ToolResult.failure(tool.name, ErrorCode.CANCELLED, f"{tool.name} was stopped by the user.", elapsed())
    except Busy as busy:
        return ToolResult.failure(tool.name, ErrorCode.BUSY, busy.message, elapsed())
    except Exception:
        log.exception("tool %s failed unexpectedly (user %s)", tool.name, ctx.user_id)
        return ToolResult.failure(
            tool.name, ErrorCode.INTERNAL_ERROR, f"{tool.name} failed unexpectedly; try again later.", elapsed()
        )
    return ToolResult(
        tool=tool.name,
        ok=True,
        output=output.model_dump(mode="json"),
        text=output.render(),
        duration_ms=elapsed(),
    )
