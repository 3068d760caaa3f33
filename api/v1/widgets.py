"""A question for the user (SPEC 8) asked in a `/v1` turn, answered by the client's next message.

An OpenAI client has no widget and no `POST /api/ai/tool-result`. So a `/v1` turn that ends
on `/ask_choice`, `/ask_text` or `/confirm` shows the question as text (`api/openai_wire`:
the options numbered, how to reply) and the client's NEXT user message in the same
conversation is the answer. "The same conversation" is found in one of two ways:
- `X-Session-Id` names a session whose last stored message is the pending question; or
- without the header, the request's history ends with our answer to that question: the
  last assistant message before the turn's message holds the question's tool block, whose
  `id` is the call's `toolCallId` (how Open WebUI continues: it resends the history).

The answer goes through the same checks and handler as `POST /api/ai/tool-result`
(`check_answer`, `apply_answer`, the call marked answered in the same transaction, the
result stored as a `ui_tools` message, then the model's next pass), with one convenience
for typed answers: a choice may be given by its number. An answer that does not fit is not
stored: the client gets the reason, the question and its options again (the question stays
open); a message that answers nothing (no pending question) is an ordinary turn.

An approval (SPEC 8, Approval) is answered the same way: `yes` (or approve, run, ok…) runs
the command, any other message declines it (it is never an invalid answer), and the turn goes
on (`pipeline/approved.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api.database import get_db
from api.errors import ApiError
from api.tool_results import continue_after_answer, continue_after_approval, fail, take_approval
from api.turns import runner
from api.v1.wire import block_call_ids, pending_widget
from live.turns import TurnLease
from pipeline.turn import TurnServices
from storage.connection import DbConnection
from storage.db import transaction
from storage.messages import Message, find_tool_call, mark_tool_call, recent_messages
from tools.base import ErrorCode, ToolFailure
from tools.interactive import APPROVE, InputMethod, WidgetOutput, apply_answer, check_answer

ROLE = "ui_tools"


@dataclass(frozen=True)
class PendingQuestion:
    """A stored question (`ui_tools`, still pending) and the widget it shows."""

    call: Message
    widget: WidgetOutput

    def public(self) -> dict[str, Any]:
        return self.call.public()


def as_pending(message: Message | None) -> PendingQuestion | None:
    if message is None or message.role != ROLE:
        return None
    widget = pending_widget(message.public())
    return PendingQuestion(message, widget) if widget is not None else None


def pending_in_session(conn: DbConnection, session_id: str) -> PendingQuestion | None:
    """The session's question when it is the session's last stored message (the turn ended on it)."""
    last = recent_messages(conn, session_id, 1)
    return as_pending(last[0] if last else None)


def pending_from_history(conn: DbConnection, user_id: int, assistant_text: str) -> PendingQuestion | None:
    """The question whose block ends the client's last assistant message, if it is this user's and open."""
    ids = block_call_ids(assistant_text)
    return as_pending(find_tool_call(conn, user_id, ids[-1])) if ids else None


def typed_answer(widget: WidgetOutput, text: str) -> Any:
    """The user's message as the widget's value (`check_answer`; a choice may be its number).

    Raises ToolFailure(INVALID_TOOL_RESULT) with what fits, as `POST /api/ai/tool-result` does."""
    value = text.strip()
    if widget.widget == "approval":  # yes (or approve, run…) runs it; anything else declines
        return value.rstrip(".!").strip().lower() in APPROVE
    options = widget.options
    if widget.widget == "choice" and value.rstrip(".").isdigit():
        number = int(value.rstrip("."))
        if not 1 <= number <= len(options):
            raise ToolFailure(
                ErrorCode.INVALID_TOOL_RESULT,
                f"there is no option {number}; choose 1-{len(options)} or one of: {', '.join(options)}",
            )
        value = options[number - 1]
    return check_answer(widget, value)


def invalid_answer_payload(question: PendingQuestion, failure: ToolFailure, turn_id: str) -> dict[str, Any]:
    """What a client gets for an answer that does not fit: the reason, then the question again."""
    reason = failure.message[:1].upper() + failure.message[1:]
    asked = question.widget.question
    return {
        "turn_id": turn_id,
        "reply": f"That answer does not fit: {reason}.\n\n{asked}",
        "messages": [question.public()],
    }


def start_answer(services: TurnServices, question: PendingQuestion, user_id: int, value: Any, lease: TurnLease) -> None:
    """Apply the answer (one transaction), store it, and start the model's next pass on `lease`.

    The same steps as `POST /api/ai/tool-result` after its checks; a failing handler stores
    the error, leaves the question open and answers its code (`api.tool_results.fail`)."""
    conn = get_db()
    call = question.call
    if question.widget.widget == "approval":
        take_approval(conn, call)
        runner().start(lease, continue_after_approval(services, call, user_id, bool(value)))
        return
    method: InputMethod = "selection" if question.widget.widget != "text" else "text"
    try:
        with transaction(conn):
            output = apply_answer(conn, user_id, question.widget, value, method)
            if not mark_tool_call(conn, call.id, "answered"):
                raise ApiError(409, "already_answered", "this question was already answered")
    except ToolFailure as failure:
        fail(conn, call, user_id, failure.code, failure.message, 422)
    runner().start(lease, continue_after_answer(services, call, user_id, output))
