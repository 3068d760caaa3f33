"""One user turn, end to end (SPEC section 6). Each numbered rule is marked `# 6.N`.

The one way in is `run_turn(services, conn, start, …)`: `start` says how the turn begins
(`pipeline/starts.py`: a new message, an edit, a retry, a regenerate, a widget's answer, an
approval's answer); everything after that is the same loop:
user message stored -> provider pass -> (command? run tool, store `<x>_tools`, next pass)
-> plain answer stored as `assistant`. The loop is bounded: `MAX_TOOL_ROUNDS` tool rounds,
so at most `MAX_TOOL_ROUNDS + 1` passes, each with at most one retry. A turn that goes on
after a question (a widget, an approval) counts the rounds its user message already used.

Passes stream (SPEC 7a): `pipeline/passes.py` reads the provider through a `ReplyGate`,
which publishes plain answers as `answer.delta` while they are written. The turn's
`CancelToken` stops it wherever it is: the answer text already shown is kept as the
`assistant` message with `meta.stopped` (7a.5), and `meta.stop_reason` says who stopped it
(the user, or the turn's own time limit, `MAX_TURN_S`).

Whether a command asks its user first is `pipeline/approval.py`'s verdict; an approved
command runs here like any other (its result under the tool's role, with `meta.approval`), a
declined one stores the result that tells the model so (`DECLINED`).

Sizes (SPEC 12): a pass reads at most what `pipeline/reply_cap.py` allows, a plain answer is
stored as the gate showed it (cut with a note past `MAX_ANSWER_CHARS`), a command whose body
was cut is refused rather than run on part of its body, and a tool result is stored through
`tools.contract.stored_result` (64 KiB of text, 256 KiB of structured output).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from commands.detect import Command, detect_command, first_line_and_rest
from commands.router import Routed, refuse, route
from foundation.cancellation import NEVER, CancelToken
from foundation.events import EventName
from pipeline.approval import Verdict, decide
from pipeline.catalog import Reach
from pipeline.context import build_context, image_in_window, is_tool_role, needs_vision
from pipeline.decide import decide_by_mass, mass_decider
from pipeline.passes import provider_pass
from pipeline.preferences import Preferences, turn_preferences
from pipeline.prompt import Listing
from pipeline.reply_cap import MAX_REPLY_CHARS, clip_answer
from pipeline.reply_gate import Decision
from pipeline.results import (
    EventSink,
    ProviderUnavailable,
    StorageUnavailable,
    ToolSummary,
    TurnCrashed,
    TurnFailed,
    TurnResult,
    TurnServices,
    ignore_event,
    stop_reason,
    tool_context,
)
from pipeline.starts import ApprovalAnswer, Edit, NewMessage, Regenerate, Retry, TurnStart, WidgetAnswer
from providers import ChatMessage, Completion, FallbackChain, TurnWait
from storage.connection import DbConnection, lend_back
from storage.errors import StorageError
from storage.learner_tasks import any_open_tasks
from storage.messages import Message, add_message, recent_messages, set_active_leaf, set_turn_error
from storage.roles import ASSISTANT, ROUTER_TOOLS, UI_TOOLS, USER
from tools.base import ErrorCode, Tool, ToolFailure, ToolResult
from tools.contract import MAX_BODY_CHARS, command_text, stored_result
from tools.interactive import approval_widget
from tools.meta import UI_PENDING, UI_RESULT, ToolMeta, add_tool_message
from tools.registry import ToolRegistry

TOOL_LIMIT_REACHED = "I reached the tool limit for this turn before finishing. Please ask again or rephrase."
DECLINE_HINT = "Do not run it again unless the user asks for it; answer without it."
GONE = "this command is no longer available here (its tool changed since the user was asked)"
BODY_CUT = (
    f"the reply was cut at {MAX_REPLY_CHARS:,} characters, more than any command's body may hold; send a shorter body"
)
BODY_UNSHOWN = (
    f"this command asks the user first, who must see all of it: its body may hold at most {MAX_BODY_CHARS:,} "
    "characters; send a shorter body (write a long file in parts)"
)


@dataclass
class _Turn:
    """Mutable state of one turn in flight (local to one request, never shared)."""

    services: TurnServices
    conn: DbConnection
    user_id: int
    session_id: str
    emit: EventSink
    history: list[Message]
    cancel: CancelToken = NEVER
    stored: list[Message] = field(default_factory=list)
    last_tool: ToolSummary | None = None

    def store(self, role: str, content: str, meta: dict[str, Any] | ToolMeta | None = None) -> Message:
        """Store one message of this turn; a tool message's meta is a `ToolMeta` (`add_tool_message`)."""
        if isinstance(meta, ToolMeta):
            message = add_tool_message(
                self.conn, session_id=self.session_id, user_id=self.user_id, role=role, content=content, meta=meta
            )
        else:
            message = add_message(
                self.conn, session_id=self.session_id, user_id=self.user_id, role=role, content=content, meta=meta
            )
        self.stored.append(message)
        self.history.append(message)
        self.emit(EventName.MESSAGE_STORED, {"id": message.id, "role": role})
        return message

    def result(self, reply: str) -> TurnResult:
        return TurnResult(session_id=self.session_id, reply=reply, messages=self.stored, tool=self.last_tool)

    def stop(self, shown: str, by: Completion | None = None) -> TurnResult:
        """Cancelled: keep the answer text already shown, nothing when none was (7a.5)."""
        reason = stop_reason(self.cancel)
        if shown:
            self.store(ASSISTANT, shown, {"stopped": True, "stop_reason": reason, **answered_by(by)})
        return dataclasses.replace(self.result(shown), stopped=True, stop_reason=reason)


def answered_by(completion: Completion | None) -> dict[str, Any]:
    """`meta.answered_by` of an assistant message: the chain entry that wrote it (its time is
    the message's `created_at`), so the chat can say which model answered."""
    if completion is None:
        return {}
    return {"answered_by": {"provider": completion.provider, "model": completion.model}}


def takes_body(registry: ToolRegistry) -> Callable[[str], bool]:
    """Whether a command's body matters; unknown names take none (their error needs no body)."""

    def check(name: str) -> bool:
        tool = registry.for_command(name)
        return tool is not None and tool.command is not None and tool.command.takes_body

    return check


def strip_commands(text: str) -> str:
    """Drop leading command lines (a command in the last pass is never run, 6.6)."""
    rest = text
    while detect_command(rest) is not None:
        rest = first_line_and_rest(rest)[1]
    return rest.strip()


def run_command(
    turn: _Turn,
    command: Command,
    user_message_id: int,
    *,
    refusal: ToolFailure | None = None,
    writes_allowed: bool = True,
    **extra: Any,
) -> Routed:
    """Run one command (or refuse it, `refusal`) and store its result; `extra`: more `meta` keys."""
    services = turn.services

    def progress(done: float, total: float | None, message: str | None) -> None:  # SPEC 7: a new event
        turn.emit(EventName.TOOL_PROGRESS, {"name": command.name, "progress": done, "total": total, "message": message})

    ctx = tool_context(
        services, turn.conn, turn.user_id, turn.session_id, user_message_id, turn.cancel, progress, writes_allowed
    )
    turn.emit(EventName.TOOL_STARTED, {"name": command.name})
    if refusal is not None:  # e.g. never run a tool on part of its body
        routed = refuse(command, services.registry, refusal)
    else:
        lend_back(turn.conn)  # a tool may wait seconds (the web, the judge): no server connection held meanwhile
        routed = route(command, services.registry, ctx)
    result = routed.result
    turn.emit(
        EventName.TOOL_FINISHED,
        {"name": command.name, "ok": result.ok, "code": result.error_code, "duration_ms": result.duration_ms},
    )
    pending: dict[str, Any] = {}
    if routed.awaiting_user:  # SPEC 8: store the pending call; the answer continues the loop
        pending = {"kind": UI_PENDING, "status": "pending", "tool_call_id": f"call_{uuid.uuid4().hex}"}
    stored = stored_result(
        routed.role, command.name, command.line, result, **pending, **command_text(command.args, command.body), **extra
    )  # the UI shows the body
    turn.store(routed.role, stored.content, stored.tool_meta)  # 6.5, 6.8
    turn.last_tool = ToolSummary(name=command.name, ok=result.ok, code=result.error_code)
    return routed


def ask_approval(turn: _Turn, tool: Tool[Any, Any], command: Command) -> TurnResult:
    """SPEC 8, Approval: store the call as a question (`ui_tools`, pending, with the command
    whole in `meta`) and end the turn; nothing runs until the user approves (`ApprovalAnswer`)."""
    widget = approval_widget(command.line)
    asked = ToolResult(tool=tool.name, ok=True, output=widget.model_dump(mode="json"), text=widget.render())
    call_id = f"call_{uuid.uuid4().hex}"
    stored = stored_result(
        UI_TOOLS,
        command.name,
        command.line,
        asked,
        kind=UI_PENDING,
        status="pending",
        tool_call_id=call_id,
        **command_text(command.args, command.body),
    )
    turn.store(UI_TOOLS, stored.content, stored.tool_meta)
    turn.emit(EventName.APPROVAL_REQUESTED, {"name": command.name, "tool_call_id": call_id})
    turn.last_tool = ToolSummary(name=command.name, ok=True)
    return turn.result(widget.question)


def turn_reach(turn: _Turn) -> Reach:
    """What this turn can use (SPEC 6.2): the deployment's judge and image provider, an image in
    the context window, a loaded course."""
    services = turn.services
    return Reach.of(
        judge=services.judge is not None,
        image_provider=services.settings.image_provider is not None,
        image=image_in_window(turn.history, services.settings.vision_followup_turns),
        course=any_open_tasks(turn.conn),
    )


def verdict_on(turn: _Turn, tool: Tool[Any, Any], command: Command, mine: Preferences, user_message_id: int) -> Verdict:
    """Whether this call runs, asks first or is refused (`pipeline/approval.py` decides)."""
    ctx = tool_context(turn.services, turn.conn, turn.user_id, turn.session_id, user_message_id, turn.cancel)
    return decide(tool, command, ctx, turn.services.settings.tool_approval, mine.approval)


def asked_words(turn: _Turn) -> str:
    """The user's message this turn answers."""
    return next((message.content for message in reversed(turn.history) if message.role == USER), "")


def turn_listing(turn: _Turn, reach: Reach) -> Listing:
    """The commands this turn's prompt names (`PROMPT_COMMANDS`: all, or the best for its words)."""
    return turn.services.prompts.listing(reach, asked_words(turn), turn.services.settings.prompt_commands)


def decided_grammar(
    turn: _Turn, chain: FallbackChain, context: Sequence[ChatMessage], reach: Reach, listing: Listing, wait: TurnWait
) -> str | None:
    """The grammar that holds a first pass to what the model's probabilities decided
    (`pipeline/decide.py`), or None to leave the pass as it was (greedy)."""
    settings = turn.services.settings
    provider = mass_decider(chain, settings.llm_decide)
    if provider is None:
        return None
    decision = decide_by_mass(
        provider,
        context,
        listing.tools,
        candidates=turn.services.prompts.candidates(reach, listing, asked_words(turn), settings.command_shortlist),
        threshold=settings.llm_decide_threshold,
        cancel=turn.cancel,
        wait=wait,
    )
    if decision is None:
        return None
    turn.emit(
        EventName.PASS_DECIDED,
        {
            "pass": 0,
            "decision": "prose" if decision.command is None else "command",
            "reads": decision.reads,
            "elapsed_ms": decision.elapsed_ms,
        },
    )
    return decision.grammar


def run_passes(turn: _Turn, user_message_id: int, first_pass: int) -> TurnResult:
    """Provider passes `first_pass`..`MAX_TOOL_ROUNDS` (a pass per tool round, plus the last)."""
    services, settings = turn.services, turn.services.settings
    max_rounds = settings.max_tool_rounds
    reach = turn_reach(turn)
    mine = turn_preferences(turn.conn, turn.user_id, turn.session_id, services.chat)  # SPEC 17: the user's settings
    wait = TurnWait(settings.llm_wait_s)  # every pass's wait for a first token, together (LLM_WAIT_S)
    listing = turn_listing(turn, reach)
    for pass_index in range(first_pass, max_rounds + 1):
        if turn.cancel.cancelled:
            return turn.stop("")
        with_demos = bool(settings.prompt_demos) and pass_index == 0  # a first pass only
        context = build_context(
            services.prompts.system_prompt(reach, demos=with_demos, preferences=mine.prompt, cut=listing.cut),
            turn.history,
            followup_turns=settings.vision_followup_turns,
            load_images=services.load_images,
            demos=services.prompts.demonstrations(reach) if with_demos else (),
            listing=listing.message,
        )
        last_pass = pass_index >= max_rounds
        vision = needs_vision(context)
        chain = services.vision if vision else mine.chain  # 6.9
        lend_back(turn.conn)  # the model may take minutes: no server connection held meanwhile
        # a pass that may use a command is held to the turn's commands or plain text (7a.1)
        first_line = settings.llm_grammar == "first_line" and not last_pass
        grammar = services.prompts.grammar(reach, listing) if first_line else None
        if pass_index == 0 and not last_pass and not vision:  # 6.11: a first pass may decide by mass
            grammar = decided_grammar(turn, chain, context, reach, listing, wait) or grammar
        outcome = provider_pass(
            chain,
            context,
            turn.emit,
            turn.cancel,
            takes_body(services.registry),
            pass_index=pass_index,
            last_pass=last_pass,
            grammar=grammar,
            wait=wait,
            watchdog=services.waiting,
        )
        if outcome.stopped:
            return turn.stop(outcome.gate.shown, outcome.completion)
        reply = outcome.reply
        if reply is None:
            raise ProviderUnavailable(
                user_message_id,
                outcome.completion,
                timeout_s=settings.llm_timeout_s,
                idle_timeout_s=settings.llm_idle_timeout_s,
            )
        if outcome.gate.decision is Decision.TEXT:
            answer = turn.store(ASSISTANT, reply, answered_by(outcome.completion))  # 6.10: role set here, never parsed
            return turn.result(answer.content)
        command = detect_command(reply)
        assert command is not None  # the gate decided "command" with the same detector
        if not takes_body(services.registry)(command.name):
            # SPEC 5, 7: what follows a body-less command's line is discarded here, before
            # anything can store, show or send it (a server that sent it in the same piece)
            command = dataclasses.replace(command, body="")
        turn.emit(EventName.COMMAND_DETECTED, {"name": command.name})
        if last_pass:  # 6.6: a command in the last allowed pass is not run
            text = clip_answer(strip_commands(reply)) or TOOL_LIMIT_REACHED
            turn.emit(EventName.ANSWER_DELTA, {"pass": pass_index, "text": text})
            answer = turn.store(ASSISTANT, text, answered_by(outcome.completion))
            return turn.result(answer.content)
        tool = services.registry.for_command(command.name)
        verdict = Verdict("run")
        if outcome.cut:
            verdict = Verdict.refused(ToolFailure(ErrorCode.VALIDATION_FAILED, BODY_CUT))
        elif tool is not None:
            verdict = verdict_on(turn, tool, command, mine, user_message_id)
        if verdict.kind == "ask" and len(command.body) > MAX_BODY_CHARS:  # the user approves all they saw
            verdict = Verdict.refused(ToolFailure(ErrorCode.VALIDATION_FAILED, BODY_UNSHOWN))
        if verdict.kind == "ask":
            assert tool is not None
            return ask_approval(turn, tool, command)
        routed = run_command(
            turn, command, user_message_id, refusal=verdict.failure, writes_allowed=verdict.writes_allowed
        )
        if turn.cancel.cancelled:
            return turn.stop("")
        if routed.terminal:  # 6.7: a successful image result ends the turn
            return turn.result(turn.stored[-1].content)
        if routed.awaiting_user:  # the user answers through POST /api/ai/tool-result
            return turn.result(str((routed.result.output or {}).get("question", "")))
    raise AssertionError("unreachable: the last pass always returns")  # pragma: no cover


def guarded(turn: _Turn, user_message_id: int | None, passes: Callable[[], TurnResult]) -> TurnResult:
    """Run the passes; any failure after the user message was stored names that message."""
    try:
        return passes()
    except TurnFailed:
        raise
    except StorageError as error:
        raise StorageUnavailable(f"the database refused a write: {error}", user_message_id) from error
    except Exception as error:
        raise TurnCrashed(f"the turn failed: {type(error).__name__}", user_message_id) from error


def refused_storage(what: str, error: StorageError, user_message_id: int | None = None) -> StorageUnavailable:
    """A database that refuses a read or a write before the passes fails the turn as
    StorageUnavailable (a 503 or a terminal `error` event), not as a crash."""
    return StorageUnavailable(f"the database refused a {what}: {error}", user_message_id)


def rounds_used(history: list[Message]) -> tuple[int, int | None]:
    """(tool rounds since the last user message, that message's id)."""
    rounds = 0
    for message in reversed(history):
        if message.role == USER:
            return rounds, message.id
        if is_tool_role(message.role) and ToolMeta.of(message).kind != UI_RESULT:
            rounds += 1
    return rounds, None


def asked_command(meta: ToolMeta) -> Command:
    """The command as the question stored it (and the user saw it)."""
    return Command(
        name=str(meta.command), args=meta.args or "", body=meta.body or "", line=str(meta.command_line or "")
    )


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


def widget_answered(turn: _Turn, start: WidgetAnswer) -> None:
    """Store a widget's answer (already applied) as its `ui_tools` result."""
    meta = ToolMeta.of(start.call)
    output = start.output
    result = ToolResult(tool=str(meta.tool), ok=True, output=output.model_dump(mode="json"), text=output.render())
    stored = stored_result(
        UI_TOOLS, str(meta.command), str(meta.command_line), result, tool_call_id=meta.tool_call_id, kind=UI_RESULT
    )
    turn.store(UI_TOOLS, stored.content, ToolMeta.model_validate({**stored.tool_meta.stored(), "kind": UI_RESULT}))


def approval_answered(turn: _Turn, start: ApprovalAnswer, user_message_id: int) -> TurnResult | None:
    """Run (or decline) the approved call and store its result; a result that ends the turn
    (stopped, or a successful image) is returned, else None and the passes go on."""
    meta = ToolMeta.of(start.call)
    command = asked_command(meta)
    answer: dict[str, Any] = {"tool_call_id": meta.tool_call_id, "kind": UI_RESULT}
    tool = turn.services.registry.for_command(command.name)
    if not start.approved:
        decline(turn, command, tool.result_role if tool else ROUTER_TOOLS, str(meta.tool), answer)
        return None
    gone = tool is None or tool.name != meta.tool
    refusal = ToolFailure(ErrorCode.VALIDATION_FAILED, GONE) if gone else None
    routed = run_command(turn, command, user_message_id, refusal=refusal, approval="approved", **answer)
    if turn.cancel.cancelled:
        return turn.stop("")
    if routed.terminal:  # 6.7: a successful image result ends the turn
        return turn.result(turn.stored[-1].content)
    return None


def begin(turn: _Turn, start: TurnStart) -> tuple[int | None, int]:
    """The turn's first step by its start: (its user message's id, the first pass's index).

    A new message or an edit is stored first (6.4: never lost); a retry and a regenerate answer
    a stored one; an answer to a question goes on with the user turn it belongs to, whose
    rounds count against `MAX_TOOL_ROUNDS` (SPEC 8), so answering never extends a turn."""
    if isinstance(start, NewMessage | Edit):
        return turn.store(USER, start.text, start.meta).id, 0
    if isinstance(start, Retry | Regenerate):
        turn.stored.append(start.message)  # the turn's user message, already in the history
        return start.message.id, 0
    used, user_message_id = rounds_used(turn.history)
    return user_message_id, used


def fork_of(start: TurnStart) -> tuple[bool, int | None]:
    """Where the branch on screen is cut back to before anything is read (SPEC 17): an edit at
    its parent, a regenerate at its message; (False, None) for every other start."""
    if isinstance(start, Edit):
        return True, start.parent_id
    if isinstance(start, Regenerate):
        return True, start.message.id
    return False, None


def prepare(conn: DbConnection, session_id: str, start: TurnStart) -> None:
    """Move the active leaf to a fork, and drop the failure mark of a message answered again
    (a new failure marks it again)."""
    forks, leaf = fork_of(start)
    try:
        if forks:
            set_active_leaf(conn, session_id, leaf)
        if isinstance(start, Retry | Regenerate):
            set_turn_error(conn, start.message.id, None)
    except StorageError as error:
        raise refused_storage("write", error) from error


def run_turn(
    services: TurnServices,
    conn: DbConnection,
    start: TurnStart,
    *,
    user_id: int,
    session_id: str,
    emit: EventSink = ignore_event,
    cancel: CancelToken = NEVER,
) -> TurnResult:
    """Run one turn of an owned session, begun by `start` (validation and the checks that allow
    the start are the caller's, under its claim on the session, 6.1)."""
    prepare(conn, session_id, start)
    try:
        history = recent_messages(conn, session_id, services.settings.context_messages)  # 6.2
    except StorageError as error:
        raise refused_storage("read", error) from error
    turn = _Turn(services, conn, user_id, session_id, emit, history, cancel)
    started: dict[str, Any] = {"session_id": session_id}
    if isinstance(start, Retry):
        started["retry_of"] = start.message.id
    if isinstance(start, WidgetAnswer | ApprovalAnswer):
        started["continuation"] = True
    emit(EventName.TURN_STARTED, started)
    try:
        user_message_id, first_pass = begin(turn, start)
    except StorageError as error:
        raise refused_storage("write", error) from error

    def passes() -> TurnResult:
        if isinstance(start, WidgetAnswer):
            widget_answered(turn, start)
        elif isinstance(start, ApprovalAnswer):
            ended = approval_answered(turn, start, user_message_id or 0)
            if ended is not None:
                return ended
        return run_passes(turn, user_message_id or 0, first_pass=first_pass)

    return guarded(turn, user_message_id, passes)
