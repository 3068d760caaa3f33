"""A question for the user (SPEC 8) asked in a `/v1` turn, answered by the client's next message.

An OpenAI client has no widget and no `POST /api/ai/tool-result`. So a `/v1` turn that ends
on `/ask_choice`, `/ask_text` or `/confirm` shows the question as text (`api/openai_wire`:
the options numbered, how to reply) and the client's NEXT user message in the same
conversation is the answer. "The same conversation" is found in one of two ways:
- `X-Session-Id` names a session whose last stored message is the pending question; or
- without the header, the request's history ends with our answer to that question: the
  last assistant message before the turn's message holds the question's tool block, whose
  `id` is the call's `toolCallId` (how Open WebUI continues: it resends the history).

The answer goes through the same steps as `POST /api/ai/tool-result` (`pipeline/questions.py`:
the value checked, applied and the call marked answered in one transaction, the result stored
as a `ui_tools` message, then the model's next pass), with one convenience for typed answers:
a choice may be given by its number. An answer that does not fit is not
stored: the client gets the reason, the question and its options again (the question stays
open); a message that answers nothing (no pending question) is an ordinary turn.

An approval (SPEC 8, Approval) is answered the same way: `yes` (or approve, run, ok…) runs
the command, any other message declines it (it is never an invalid answer), and the turn goes
on (`pipeline/approved.py`).
"""

from __future__ import annotations

from typing import Any

from api.v1.wire import block_call_ids
from pipeline.questions import Question, as_question
from storage.connection import DbConnection
from storage.messages import find_tool_call, recent_messages
from tools.base import ErrorCode, ToolFailure
from tools.interactive import APPROVE, check_answer


def pending_in_session(conn: DbConnection, session_id: str) -> Question | None:
    """The session's question when it is the session's last stored message (the turn ended on it)."""
    last = recent_messages(conn, session_id, 1)
    return as_question(last[0] if last else None)


def pending_from_history(conn: DbConnection, user_id: int, assistant_text: str) -> Question | None:
    """The question whose block ends the client's last assistant message, if it is this user's and open."""
    ids = block_call_ids(assistant_text)
    return as_question(find_tool_call(conn, user_id, ids[-1])) if ids else None


def typed_answer(question: Question, text: str) -> Any:
    """The user's message as the widget's value (`check_answer`; a choice may be its number).

    Raises ToolFailure(INVALID_TOOL_RESULT) with what fits, as `POST /api/ai/tool-result` does."""
    widget = question.widget
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


def invalid_answer_payload(question: Question, reason_text: str, turn_id: str) -> dict[str, Any]:
    """What a client gets for an answer that does not fit: the reason, then the question again."""
    reason = reason_text[:1].upper() + reason_text[1:]
    return {
        "turn_id": turn_id,
        "reply": f"That answer does not fit: {reason}.\n\n{question.widget.question}",
        "messages": [question.call.public()],
    }
