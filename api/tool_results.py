"""`POST /api/ai/tool-result`: the user's answer to an interactive widget (SPEC section 8).

Order of checks: body shape (400 INVALID_TOOL_RESULT), the call exists and is this user's
(404), it is still pending (409), the body matches the call (tool, field, conversation:
400), the value fits the widget (400). Then, in one transaction, the answer is written to
the profile and the call marked answered; the result is stored as a `ui_tools` message and
the model's next pass runs (JSON answer, or SSE with `Accept: text/event-stream`).

An approval (SPEC 8, Approval: `toolName` the command, `targetField` `approval`, `value`
true to run it) passes the same checks; the call is marked answered (once: a second answer
is 409), then the turn runs or declines the command and goes on.

Finding, checking and applying the answer once is `pipeline/questions.py`'s, shared with a
`/v1` client's answer; this view only reads the body and maps each refusal's code to a status.
A failing handler (PROFILE_UPDATE_FAILED, or TOOL_EXECUTION_FAILED for anything
unexpected) is logged with tool, call id and user, stored as an error result, and leaves
the call pending: the client can fix the cause and send the answer again.

Sizes: `value` is text of at most `MAX_ANSWER_CHARS` or a boolean (no widget takes anything
else), the other fields are short, and the stored result is built by
`tools.contract.stored_result` like every tool result.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NoReturn

from flask import Blueprint
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from api.auth import current_user, require_user
from api.bodies import json_object
from api.chat import TURN_STREAM
from api.database import get_db
from api.declare import TURN_FAILED, Reply, budget, operation
from api.errors import ApiError
from api.services import services as app_services
from api.turns import answer_turn, desk, turn_work
from pipeline.questions import Refusal, apply_once, check_value, find_question
from tools.base import ErrorCode
from tools.interactive import MAX_ANSWER_CHARS

bp = Blueprint("tool_results", __name__)
bp.before_request(require_user)

REFUSAL_STATUS: dict[str, int] = {
    "not_found": 404,
    "already_answered": 409,
    "approval_expired": 409,
    "not_on_active_branch": 409,
    ErrorCode.INVALID_TOOL_RESULT: 400,
    ErrorCode.PROFILE_UPDATE_FAILED: 422,
    ErrorCode.TOOL_EXECUTION_FAILED: 500,
}


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


def refused(refusal: Refusal) -> NoReturn:
    """A refusal of `pipeline/questions.py` as its HTTP error."""
    raise ApiError(REFUSAL_STATUS.get(refusal.code, 400), refusal.code, refusal.message)


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
    conn = get_db()
    question = find_question(conn, user.id, body.toolCallId, body.conversationId)
    if isinstance(question, Refusal):
        refused(question)
    value = check_value(question, body.toolName, body.targetField, body.value)
    if isinstance(value, Refusal):
        refused(value)
    method = body.inputMethod or ("selection" if question.widget.widget != "text" else "text")
    session_id = question.call.session_id
    with desk().claim(session_id, user_id=user.id) as claim:  # 409 turn_in_progress before the answer is applied
        start = apply_once(conn, question, user.id, value, method)
        if isinstance(start, Refusal):
            refused(start)
        return answer_turn(claim, turn_work(app_services().turns, user.id, session_id, start))
