"""The rest of a turn that paused for the user's approval (SPEC 8, Approval).

`pipeline/turn.py` stored the call as a pending question and ended the turn; the user's
answer (`POST /api/ai/tool-result`, or a `/v1` client's next message) was checked and the
call marked answered, once, by the caller. Here the turn goes on:

- approved: the command stored with the question (`meta.command`, `args`, `body`, exactly
  what the user saw) runs like any command, and its result is stored as usual, under the
  tool's role (`<tool>_tools`);
- declined: nothing runs; the stored result is the error `DECLINED`
  (`> Error: DECLINED: the user declined to run /write_file notes.md`), so the model knows;

either way with `meta.approval` (`approved`/`declined`) and the question's `tool_call_id`,
then the model's next pass. The round was counted when the question was stored
(`rounds_used`), so an approval never extends a turn past `MAX_TOOL_ROUNDS`.
"""

from __future__ import annotations

from typing import Any

from commands.detect import Command
from foundation.cancellation import NEVER, CancelToken
from pipeline.turn import (
    EventSink,
    ToolSummary,
    TurnResult,
    TurnServices,
    _Turn,
    guarded,
    ignore_event,
    rounds_used,
    run_command,
    run_passes,
)
from storage.connection import DbConnection
from storage.messages import Message, recent_messages
from tools.base import ErrorCode, ToolResult
from tools.contract import command_text, stored_result
from tools.meta import UI_RESULT, ToolMeta

DECLINE_HINT = "Do not run it again unless the user asks for it; answer without it."
GONE = "this command is no longer available here (its tool changed since the user was asked)"


def asked_command(meta: ToolMeta) -> Command:
    """The command as the question stored it (and the user saw it)."""
    return Command(
        name=str(meta.command), args=meta.args or "", body=meta.body or "", line=str(meta.command_line or "")
    )


def continue_approval(
    services: TurnServices,
    conn: DbConnection,
    *,
    user_id: int,
    call: Message,
    approved: bool,
    emit: EventSink = ignore_event,
    cancel: CancelToken = NEVER,
) -> TurnResult:
    """Run (or decline) the approved call, store its result, then the model's next pass."""
    history = recent_messages(conn, call.session_id, services.settings.context_messages)
    turn = _Turn(services, conn, user_id, call.session_id, emit, history, cancel)
    emit("turn.started", {"session_id": call.session_id, "continuation": True})
    used, user_message_id = rounds_used(turn.history)
    meta = ToolMeta.of(call)
    command = asked_command(meta)
    answer = {"tool_call_id": meta.tool_call_id, "kind": UI_RESULT}

    def passes() -> TurnResult:
        tool = services.registry.for_command(command.name)
        if not approved:
            decline(turn, command, tool.result_role if tool else "router_tools", str(meta.tool), answer)
        else:
            gone = tool is None or tool.name != meta.tool
            routed = run_command(
                turn, command, user_message_id or 0, refusal=GONE if gone else None, approval="approved", **answer
            )
            if turn.cancel.cancelled:
                return turn.stop("")
            if routed.terminal:  # 6.7: a successful image result ends the turn
                return turn.result(turn.stored[-1].content)
        return run_passes(turn, user_message_id or 0, first_pass=used)

    return guarded(turn, user_message_id, passes)


def decline(turn: _Turn, command: Command, role: str, tool_name: str, answer: dict[str, Any]) -> None:
    """Store the result that tells the model the user said no (nothing ran)."""
    line = " ".join(command.line.split())[:200]
    result = ToolResult.failure(tool_name, ErrorCode.DECLINED, f"the user declined to run {line}", hint=DECLINE_HINT)
    stored = stored_result(
        role,
        command.name,
        command.line,
        result,
        approval="declined",
        **answer,
        **command_text(command.args, command.body),
    )
    turn.store(role, stored.content, stored.tool_meta)
    turn.last_tool = ToolSummary(name=command.name, ok=False, code=ErrorCode.DECLINED)
