"""Answering a question the chat asked its user, once (SPEC 8): a widget or an approval.

The one module both ways of answering use: the web UI's `POST /api/ai/tool-result` and a `/v1`
client's next message. Three steps, each a value or a `Refusal` with a stable code the HTTP
layer maps to a status:

1. `find_question`: the stored question with this call id, this user's, in this conversation
   (`not_found` otherwise, whoever else's it is), still pending (`already_answered`);
2. `check_value`: the answer names the question's command and field and fits its widget
   (`INVALID_TOOL_RESULT`);
3. `apply_once`, under the caller's claim on the session: the question is on the branch on
   screen (`not_on_active_branch`); an approval is still the chat's last message
   (`approval_expired`: its command would run out of its turn's context) and is marked answered;
   a widget's value is written to the profile and the call marked answered in ONE transaction.
   A second answer finds the call answered (`already_answered`), a replay included. What comes
   back is the `TurnStart` that goes on with the turn (`ApprovalAnswer`, `WidgetAnswer`); a
   decline is an `ApprovalAnswer` with `approved` False. A handler that fails stores its error
   as a result and leaves the question open (`PROFILE_UPDATE_FAILED`, `TOOL_EXECUTION_FAILED`):
   the user fixes the cause and answers again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pipeline.starts import ApprovalAnswer, WidgetAnswer
from storage.connection import DbConnection
from storage.db import transaction
from storage.messages import Message, find_tool_call, mark_tool_call, on_active_branch, recent_messages
from storage.roles import UI_TOOLS
from tools.base import ErrorCode, ToolFailure, ToolResult
from tools.contract import stored_result
from tools.interactive import InputMethod, WidgetOutput, apply_answer, check_answer
from tools.meta import UI_RESULT, ToolMeta, add_tool_message

log = logging.getLogger("questions")

ALREADY_ANSWERED = "this tool call was already answered"


@dataclass(frozen=True)
class Refusal:
    """Why an answer was not taken; `code` is stable (the HTTP layer gives each a status)."""

    code: str
    message: str


@dataclass(frozen=True)
class Question:
    """A stored question still waiting for its answer, and the widget it shows."""

    call: Message
    widget: WidgetOutput

    @property
    def meta(self) -> ToolMeta:
        return ToolMeta.of(self.call)


def as_question(call: Message | None) -> Question | None:
    """The pending question `call` holds, if it is one."""
    if call is None or call.role != UI_TOOLS:
        return None
    widget = ToolMeta.of(call).pending_widget()
    return Question(call, widget) if widget is not None else None


def find_question(conn: DbConnection, user_id: int, call_id: str, session_id: str) -> Question | Refusal:
    """Step 1: this user's question with this call id in this conversation, still pending."""
    call = find_tool_call(conn, user_id, call_id)
    if call is None or call.session_id != session_id:
        return Refusal("not_found", "tool call not found")
    question = as_question(call)
    if question is None:
        return Refusal("already_answered", ALREADY_ANSWERED)
    return question


def check_value(question: Question, tool_name: str, target_field: str, value: Any) -> Any | Refusal:
    """Step 2: the answer is for this question and fits its widget (the value as stored)."""
    meta = question.meta
    if tool_name != meta.command or target_field != question.widget.target_field:
        return Refusal(
            ErrorCode.INVALID_TOOL_RESULT, f"this call is {meta.command} for the field {question.widget.target_field}"
        )
    try:
        return check_answer(question.widget, value)
    except ToolFailure as failure:
        return Refusal(ErrorCode.INVALID_TOOL_RESULT, failure.message)


def apply_once(
    conn: DbConnection, question: Question, user_id: int, value: Any, method: InputMethod
) -> ApprovalAnswer | WidgetAnswer | Refusal:
    """Step 3, under the caller's claim on the session: take the answer, once."""
    call = question.call
    if not on_active_branch(conn, call.session_id, call.id):  # its answer would land on the version on screen
        return Refusal("not_on_active_branch", "this question belongs to another version of the chat; show it first")
    if question.widget.widget == "approval":
        last = recent_messages(conn, call.session_id, 1)
        if not last or last[-1].id != call.id:
            return Refusal("approval_expired", "the chat went on after this question; nothing ran, ask again")
        with transaction(conn):
            if not mark_tool_call(conn, call.id, "answered"):
                return Refusal("already_answered", ALREADY_ANSWERED)
        return ApprovalAnswer(call, approved=bool(value))
    try:
        with transaction(conn):
            output = apply_answer(conn, user_id, question.widget, value, method)
            if not mark_tool_call(conn, call.id, "answered"):
                raise _Taken()
    except _Taken:
        return Refusal("already_answered", ALREADY_ANSWERED)
    except ToolFailure as failure:
        return failed(conn, question, user_id, failure.code, failure.message)
    except Exception as error:  # a bug in a handler: logged, stored as the error, the question kept open
        log.exception("tool %s failed (call %s, user %s)", question.meta.command, question.meta.tool_call_id, user_id)
        return failed(
            conn,
            question,
            user_id,
            ErrorCode.TOOL_EXECUTION_FAILED,
            f"saving the answer failed ({type(error).__name__})",
        )
    return WidgetAnswer(call, output)


class _Taken(Exception):
    """Another answer marked the call first: this one's profile write is rolled back."""


def failed(conn: DbConnection, question: Question, user_id: int, code: str, message: str) -> Refusal:
    """Store a handler's failure as the question's error result (the call stays pending)."""
    meta = question.meta
    log.warning("tool %s failed: %s %s (call %s, user %s)", meta.command, code, message, meta.tool_call_id, user_id)
    result = ToolResult.failure(str(meta.tool), code, message)
    stored = stored_result(
        UI_TOOLS, str(meta.command), str(meta.command_line), result, tool_call_id=meta.tool_call_id, kind=UI_RESULT
    )
    add_tool_message(
        conn,
        session_id=question.call.session_id,
        user_id=user_id,
        role=UI_TOOLS,
        content=stored.content,
        meta=stored.tool_meta,
    )
    return Refusal(code, f"{message}; the question is still open, send the answer again when fixed")
