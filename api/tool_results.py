"""`POST /api/ai/tool-result`: the user's answer to an interactive widget (SPEC section 8).

Order of checks: body shape (400 INVALID_TOOL_RESULT), the call exists and is this user's
(404), it is still pending (409), the body matches the call (tool, field, conversation:
400), the value fits the widget (400). Then, in one transaction, the answer is written to
the profile and the call marked answered; the result is stored as a `ui_tools` message and
the model's next pass runs (JSON answer, or SSE with `Accept: text/event-stream`).

An approval (SPEC 8, Approval: `toolName` the command, `targetField` `approval`, `value`
true to run it) passes the same checks; the call is marked answered (once: a second answer
is 409), then the turn runs or declines the command and goes on (`pipeline/approved.py`).

A failing handler (PROFILE_UPDATE_FAILED, or TOOL_EXECUTION_FAILED for anything
unexpected) is logged with tool, call id and user, stored as an error result, and leaves
the call pending: the client can fix the cause and send the answer again.

Sizes: `value` is text of at most `MAX_ANSWER_CHARS` or a boolean (no widget takes anything
else), the other fields are short, and the stored result is built by
`tools.contract.stored_result` like every tool result.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from flask import Blueprint, Response
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from api.auth import current_user, require_user
from api.bodies import json_object
from api.chat import TURN_STREAM
from api.database import get_db
from api.declare import TURN_FAILED, Reply, budget, operation
from api.errors import ApiError
from api.services import services as app_services
from api.turns import answer_turn, runner, turn_payload
from foundation.cancellation import CancelToken
from live.runner import TurnWork
from live.turns import TurnLease
from pipeline.approved import continue_approval
from pipeline.turn import EventSink, TurnServices, continue_turn
from storage.connection import DbConnection
from storage.db import transaction
from storage.messages import Message, find_tool_call, mark_tool_call, on_active_branch, recent_messages
from tools.base import ErrorCode, ToolFailure, ToolOutput, ToolResult
from tools.contract import stored_result
from tools.interactive import MAX_ANSWER_CHARS, InputMethod, WidgetOutput, apply_answer, check_answer
from tools.meta import UI_RESULT, ToolMeta, add_tool_message

bp = Blueprint("tool_results", __name__)
bp.before_request(require_user)
log = logging.getLogger("tool_results")

ROLE = "ui_tools"


class ToolResultBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    conversationId: str = Field(min_length=1, max_length=64)
    toolCallId: str = Field(min_length=1, max_length=100)
    toolName: str = Field(min_length=1, max_length=64)
    targetField: str = Field(min_length=1, max_length=64)
    value: Annotated[str, Field(max_length=MAX_ANSWER_CHARS)] | StrictBool
    inputMethod: Literal["selection", "text", "voice"] | None = None


def invalid(message: str, details: Any = None) -> ApiError:
    return ApiError(400, ErrorCode.INVALID_TOOL_RESULT, message, details)


def parse_body() -> ToolResultBody:
    try:
        raw = json_object()
    except ApiError as error:  # not an object, or past the body reader's limits: in SPEC 8's code
        raise invalid(error.message) from error
    if "value" not in raw:
        raise invalid("value is required")
    try:
        return ToolResultBody.model_validate(raw)
    except ValidationError as error:
        details = [{"field": ".".join(map(str, e["loc"])), "message": e["msg"]} for e in error.errors()]
        raise invalid("; ".join(f"{d['field']}: {d['message']}" for d in details), details) from error


def pending_call(body: ToolResultBody, user_id: int) -> tuple[Message, WidgetOutput]:
    """The stored question this body answers, and its widget (404, 409 or 400 otherwise)."""
    call = find_tool_call(get_db(), user_id, body.toolCallId)
    if call is None or call.session_id != body.conversationId:
        raise ApiError(404, "not_found", "tool call not found")
    meta = ToolMeta.of(call)
    widget = meta.pending_widget()
    if widget is None:
        raise ApiError(409, "already_answered", "this tool call was already answered")
    if body.toolName != meta.command or body.targetField != widget.target_field:
        raise invalid(f"this call is {meta.command} for the field {widget.target_field}")
    return call, widget


def stored_answer(call: Message, result: ToolResult) -> tuple[str, ToolMeta]:
    """The answer's result message: the question's command and call id, `kind` ui_result."""
    meta = ToolMeta.of(call)
    stored = stored_result(
        ROLE, str(meta.command), str(meta.command_line), result, tool_call_id=meta.tool_call_id, kind=UI_RESULT
    )
    return stored.content, stored.tool_meta


@bp.post("/api/ai/tool-result")
@operation(
    "Answer an interactive widget or an approval (SPEC 8); the model's next pass runs",
    tag="chat",
    body=ToolResultBody,
    replies={
        200: TURN_STREAM,
        400: Reply("`INVALID_TOOL_RESULT`: the body or the value does not fit the call"),
        404: Reply("no such pending call of yours"),
        422: Reply("`PROFILE_UPDATE_FAILED`; the call stays open"),
        **TURN_FAILED,
        409: Reply(
            "already answered, an approval the chat went past (`approval_expired`), a question of "
            "another version of the chat (`not_on_active_branch`), or the session is answering another turn"
        ),
    },
)
@budget("turns")  # a widget's answer runs the model's next pass
def tool_result() -> ResponseReturnValue:
    body = parse_body()
    user = current_user()
    call, widget = pending_call(body, user.id)
    try:
        value = check_answer(widget, body.value)
    except ToolFailure as failure:
        raise invalid(failure.message) from failure
    method = body.inputMethod or ("selection" if widget.widget != "text" else "text")
    conn = get_db()
    lease = runner().claim(call.session_id)  # 409 turn_in_progress before the answer is applied
    try:
        if not on_active_branch(conn, call.session_id, call.id):  # its answer would land on the version on screen
            raise ApiError(
                409, "not_on_active_branch", "this question belongs to another version of the chat; show it first"
            )
        if widget.widget == "approval":
            take_approval(conn, call)
            return answer_turn(lease, continue_after_approval(app_services().turns, call, user.id, bool(value)))
        return continue_with_answer(conn, call, user.id, widget, value, method, lease)
    except BaseException:
        runner().live.turns.abandon(lease)
        raise


def continue_with_answer(
    conn: DbConnection,
    call: Message,
    user_id: int,
    widget: WidgetOutput,
    value: Any,
    method: InputMethod,
    lease: TurnLease,
) -> Response:
    """Apply the answer (one transaction), store it, and start the model's next pass."""
    meta = ToolMeta.of(call)
    try:
        with transaction(conn):
            output = apply_answer(conn, user_id, widget, value, method)
            if not mark_tool_call(conn, call.id, "answered"):
                raise ApiError(409, "already_answered", "this tool call was already answered")
    except ToolFailure as failure:
        fail(conn, call, user_id, failure.code, failure.message, 422)
    except ApiError:
        raise
    except Exception as error:
        log.exception("tool %s failed (call %s, user %s)", meta.command, meta.tool_call_id, user_id)
        fail(
            conn,
            call,
            user_id,
            ErrorCode.TOOL_EXECUTION_FAILED,
            f"saving the answer failed ({type(error).__name__})",
            500,
        )
    return answer_turn(lease, continue_after_answer(app_services().turns, call, user_id, output))


def continue_after_answer(services: TurnServices, call: Message, user_id: int, output: ToolOutput) -> TurnWork:
    """The rest of the turn once a widget's answer is applied (here or by the next message of
    a /v1 client): store it as the `ui_tools` result, then the next provider pass."""
    result = ToolResult(
        tool=str(ToolMeta.of(call).tool), ok=True, output=output.model_dump(mode="json"), text=output.render()
    )
    content, summary = stored_answer(call, result)

    def work(conn: DbConnection, emit: EventSink, cancel: CancelToken) -> dict[str, Any]:
        result = continue_turn(
            services,
            conn,
            user_id=user_id,
            session_id=call.session_id,
            result_role=ROLE,
            result_content=content,
            result_meta=summary,
            emit=emit,
            cancel=cancel,
        )
        return turn_payload(result)

    return work


def take_approval(conn: DbConnection, call: Message) -> None:
    """Mark an approval answered, once (409 for every later answer, a replay included);
    nothing ran before this, and the command runs only in the turn it starts. A question the
    user wrote on past (a later message in its chat) has expired: its command would run out
    of its turn's context (409 `approval_expired`)."""
    last = recent_messages(conn, call.session_id, 1)
    if not last or last[-1].id != call.id:
        raise ApiError(409, "approval_expired", "the chat went on after this question; nothing ran, ask again")
    with transaction(conn):
        if not mark_tool_call(conn, call.id, "answered"):
            raise ApiError(409, "already_answered", "this tool call was already answered")


def continue_after_approval(services: TurnServices, call: Message, user_id: int, approved: bool) -> TurnWork:
    """The rest of a turn that asked for approval (here or by the next message of a /v1
    client): run or decline the command, then the next provider pass (`pipeline/approved.py`)."""

    def work(conn: DbConnection, emit: EventSink, cancel: CancelToken) -> dict[str, Any]:
        result = continue_approval(
            services, conn, user_id=user_id, call=call, approved=approved, emit=emit, cancel=cancel
        )
        return turn_payload(result)

    return work


def fail(conn: DbConnection, call: Message, user_id: int, code: str, message: str, status: int) -> None:
    """Store the failure as an error result (the call stays pending) and answer with its code."""
    meta = ToolMeta.of(call)
    log.warning("tool %s failed: %s %s (call %s, user %s)", meta.command, code, message, meta.tool_call_id, user_id)
    result = ToolResult.failure(str(meta.tool), code, message)
    content, summary = stored_answer(call, result)
    add_tool_message(conn, session_id=call.session_id, user_id=user_id, role=ROLE, content=content, meta=summary)
    raise ApiError(status, code, f"{message}; the question is still open, send the answer again when fixed")
