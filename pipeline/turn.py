"""One user turn, end to end (SPEC section 6). Each numbered rule is marked `# 6.N`.

user message stored -> provider pass -> (command? run tool, store `<x>_tools`, next pass)
-> plain answer stored as `assistant`. The loop is bounded: `MAX_TOOL_ROUNDS` tool rounds,
so at most `MAX_TOOL_ROUNDS + 1` passes, each with at most one retry.

Passes stream (SPEC 7a): `pipeline/passes.py` reads the provider through a `ReplyGate`,
which publishes plain answers as `answer.delta` while they are written. The turn's
`CancelToken` stops it wherever it is: the answer text already shown is kept as the
`assistant` message with `meta.stopped` (7a.5).

Sizes (SPEC 12): a pass reads at most what `pipeline/reply_cap.py` allows, a plain answer is
stored as the gate showed it (cut with a note past `MAX_ANSWER_CHARS`), a command whose body
was cut is refused rather than run on part of its body, and a tool result is stored through
`tools.contract.stored_result` (64 KiB of text, 256 KiB of structured output).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from commands.detect import Command, detect_command, first_line_and_rest
from commands.router import Routed, command_input, refuse, route
from config.settings import Settings
from foundation.cancellation import NEVER, CancelToken
from llm.hints import fix_hint, what_failed
from observe.telemetry import Telemetry
from pipeline.approval import needs_approval
from pipeline.catalog import Reach, offered
from pipeline.context import ImageLoader, build_context, image_in_window, is_tool_role, needs_vision
from pipeline.demos import demonstrations
from pipeline.passes import provider_pass
from pipeline.preferences import turn_preferences
from pipeline.prompt import PromptBook
from pipeline.reply_cap import MAX_REPLY_CHARS, clip_answer
from pipeline.reply_gate import Decision
from providers import Completion, FallbackChain
from storage.connection import DbConnection, Store, lend_back
from storage.errors import StorageError
from storage.learner_tasks import any_open_tasks
from storage.messages import Message, add_message, recent_messages, set_active_leaf, set_turn_error
from tools.base import BindingError, ProgressSink, Tool, ToolContext, ToolResult
from tools.contract import MAX_BODY_CHARS, command_text, stored_result
from tools.interactive import approval_widget
from tools.meta import UI_PENDING, UI_RESULT, ToolMeta, add_tool_message
from tools.registry import ToolRegistry

if TYPE_CHECKING:
    from bounded.pool import WorkerPool
    from judge.service import Judge

UI_ROLE = "ui_tools"  # a question for the user (SPEC 8): a widget, or an approval
TOOL_LIMIT_REACHED = "I reached the tool limit for this turn before finishing. Please ask again or rephrase."
EventSink = Callable[[str, dict[str, Any]], None]


def ignore_event(name: str, data: dict[str, Any]) -> None:
    """Default event sink: events are optional for callers that do not stream."""


class TurnFailed(Exception):
    """A turn that failed after its user message was stored (the id tells the client which)."""

    def __init__(self, message: str, user_message_id: int | None) -> None:
        super().__init__(message)
        self.user_message_id = user_message_id


class ProviderUnavailable(TurnFailed):
    """The provider (and its fallbacks) failed twice in one pass; the user message is kept."""

    def __init__(
        self,
        user_message_id: int | None,
        completion: Completion,
        *,
        timeout_s: float = 120.0,
        idle_timeout_s: float = 60.0,
    ) -> None:
        super().__init__(f"provider {completion.provider} failed: {completion.failure}", user_message_id)
        self.completion = completion
        self.timeout_s = timeout_s  # LLM_TIMEOUT_S and LLM_IDLE_TIMEOUT_S, named in the message
        self.idle_timeout_s = idle_timeout_s

    @property
    def public_message(self) -> str:
        """What the user reads: what failed (which timer, which HTTP status) and what an
        operator can do about it, never a key or a URL (`llm/hints.py`; the same fix as the
        start-up log and `/health`)."""
        detail = self.completion
        kind = detail.failure.value if detail.failure else "no answer"
        what = what_failed(
            detail.failure,
            status_code=detail.status_code,
            timeout_s=self.timeout_s,
            idle_timeout_s=self.idle_timeout_s,
        )
        return (
            f"{what} ({detail.provider}: {kind}); your message was kept, retry "
            f"later. To fix it, an operator can {fix_hint(detail.provider, detail.model, detail.failure)}"
        )


class StorageUnavailable(TurnFailed):
    """The database refused a write (locked, full, read-only) in the middle of a turn."""


class TurnCrashed(TurnFailed):
    """Anything else that went wrong (a bug): the turn still ends with a clear error."""


class ToolSummary(BaseModel):
    name: str
    ok: bool
    code: str | None = None


@dataclass(frozen=True)
class TurnResult:
    session_id: str
    reply: str
    messages: list[Message]
    tool: ToolSummary | None = None
    stopped: bool = False  # cancelled by the user (7a.5)


@dataclass(frozen=True)
class TurnServices:
    """Everything a turn needs that outlives a request, built once in `create_app`."""

    settings: Settings
    database: Store
    registry: ToolRegistry
    chat: FallbackChain
    vision: FallbackChain
    prompts: PromptBook  # the system prompt of each catalog (`pipeline/prompt.py`)
    load_images: ImageLoader
    judge: Judge | None = None  # /run_code and task checks (None: no Docker judge here)
    bounded: WorkerPool | None = None  # /memory_sql, /search_files, /open_url and task checks run in its workers
    telemetry: Telemetry = field(default_factory=Telemetry.off)  # spans and counts of tools (SPEC 16)


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
        self.emit("message.stored", {"id": message.id, "role": role})
        return message

    def result(self, reply: str, *, stopped: bool = False) -> TurnResult:
        return TurnResult(
            session_id=self.session_id, reply=reply, messages=self.stored, tool=self.last_tool, stopped=stopped
        )

    def stop(self, shown: str) -> TurnResult:
        """Cancelled: keep the answer text already shown, nothing when none was (7a.5)."""
        if shown:
            self.store("assistant", shown, {"stopped": True})
        return self.result(shown, stopped=True)


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


def tool_context(
    services: TurnServices,
    conn: DbConnection,
    user_id: int,
    session_id: str | None = None,
    turn_message_id: int | None = None,
    cancel: CancelToken = NEVER,
    progress: ProgressSink | None = None,
) -> ToolContext:
    """The context every tool call gets, from chat or from `POST /tools/<name>` alike."""
    return ToolContext(
        conn=conn,
        database=services.database,
        settings=services.settings,
        user_id=user_id,
        session_id=session_id,
        turn_message_id=turn_message_id,
        judge=services.judge,
        vision=services.vision,
        bounded=services.bounded,
        cancel=cancel,
        telemetry=services.telemetry,
        progress=progress,
    )


BODY_CUT = (
    f"the reply was cut at {MAX_REPLY_CHARS:,} characters, more than any command's body may hold; send a shorter body"
)
BODY_UNSHOWN = (
    f"this command asks the user first, who must see all of it: its body may hold at most {MAX_BODY_CHARS:,} "
    "characters; send a shorter body (write a long file in parts)"
)


def run_command(
    turn: _Turn, command: Command, user_message_id: int, *, refusal: str | None = None, **extra: Any
) -> Routed:
    """Run one command (or refuse it, `refusal`) and store its result; `extra`: more `meta` keys."""
    services = turn.services

    def progress(done: float, total: float | None, message: str | None) -> None:  # SPEC 7: a new event
        turn.emit("tool.progress", {"name": command.name, "progress": done, "total": total, "message": message})

    ctx = tool_context(services, turn.conn, turn.user_id, turn.session_id, user_message_id, turn.cancel, progress)
    turn.emit("tool.started", {"name": command.name})
    if refusal is not None:  # e.g. never run a tool on part of its body
        routed = refuse(command, services.registry, refusal)
    else:
        lend_back(turn.conn)  # a tool may wait seconds (the web, the judge): no server connection held meanwhile
        routed = route(command, services.registry, ctx)
    result = routed.result
    turn.emit(
        "tool.finished",
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


def would_run(tool: Tool[Any, Any], command: Command) -> bool:
    """Whether the command's arguments fit the tool (a call that would fail its validation is
    answered with its error at once, never put to the user)."""
    if tool.command is None:
        return False
    try:
        tool.input_model.model_validate(command_input(tool.command, command))
    except (BindingError, ValueError):  # pydantic's ValidationError is a ValueError
        return False
    return True


def ask_approval(turn: _Turn, tool: Tool[Any, Any], command: Command) -> TurnResult:
    """SPEC 8, Approval: store the call as a question (`ui_tools`, pending, with the command
    whole in `meta`) and end the turn; nothing runs until the user approves
    (`pipeline/approved.py`)."""
    widget = approval_widget(command.line)
    asked = ToolResult(tool=tool.name, ok=True, output=widget.model_dump(mode="json"), text=widget.render())
    call_id = f"call_{uuid.uuid4().hex}"
    stored = stored_result(
        UI_ROLE,
        command.name,
        command.line,
        asked,
        kind=UI_PENDING,
        status="pending",
        tool_call_id=call_id,
        **command_text(command.args, command.body),
    )
    turn.store(UI_ROLE, stored.content, stored.tool_meta)
    turn.emit("approval.requested", {"name": command.name, "tool_call_id": call_id})
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


def run_passes(turn: _Turn, user_message_id: int, first_pass: int) -> TurnResult:
    """Provider passes `first_pass`..`MAX_TOOL_ROUNDS` (a pass per tool round, plus the last)."""
    services, settings = turn.services, turn.services.settings
    max_rounds = settings.max_tool_rounds
    reach = turn_reach(turn)
    mine = turn_preferences(turn.conn, turn.user_id, turn.session_id, services.chat)  # SPEC 17: the user's settings
    for pass_index in range(first_pass, max_rounds + 1):
        if turn.cancel.cancelled:
            return turn.stop("")
        with_demos = bool(settings.prompt_demos) and pass_index == 0  # a first pass only
        context = build_context(
            services.prompts.system_prompt(reach, demos=with_demos, preferences=mine.prompt),
            turn.history,
            followup_turns=settings.vision_followup_turns,
            load_images=services.load_images,
            demos=demonstrations(offered(services.registry, reach)) if with_demos else (),
        )
        last_pass = pass_index >= max_rounds
        chain = services.vision if needs_vision(context) else mine.chain  # 6.9
        lend_back(turn.conn)  # the model may take minutes: no server connection held meanwhile
        outcome = provider_pass(
            chain,
            context,
            turn.emit,
            turn.cancel,
            takes_body(services.registry),
            pass_index=pass_index,
            last_pass=last_pass,
            # a pass that may use a command is held to the turn's commands or plain text (7a.1)
            grammar=services.prompts.grammar(reach) if settings.llm_grammar == "first_line" and not last_pass else None,
        )
        if outcome.stopped:
            return turn.stop(outcome.gate.shown)
        reply = outcome.reply
        if reply is None:
            raise ProviderUnavailable(
                user_message_id,
                outcome.completion,
                timeout_s=settings.llm_timeout_s,
                idle_timeout_s=settings.llm_idle_timeout_s,
            )
        if outcome.gate.decision is Decision.TEXT:
            answer = turn.store("assistant", reply)  # 6.10: role set here, never parsed
            return turn.result(answer.content)
        command = detect_command(reply)
        assert command is not None  # the gate decided "command" with the same detector
        if not takes_body(services.registry)(command.name):
            # SPEC 5, 7: what follows a body-less command's line is discarded here, before
            # anything can store, show or send it (a server that sent it in the same piece)
            command = dataclasses.replace(command, body="")
        turn.emit("command.detected", {"name": command.name})
        if last_pass:  # 6.6: a command in the last allowed pass is not run
            text = clip_answer(strip_commands(reply)) or TOOL_LIMIT_REACHED
            turn.emit("answer.delta", {"pass": pass_index, "text": text})
            answer = turn.store("assistant", text)
            return turn.result(answer.content)
        tool = services.registry.for_command(command.name)
        if (
            not outcome.cut
            and tool is not None
            and needs_approval(tool, command, settings.tool_approval, mine.approval)
        ):
            if len(command.body) > MAX_BODY_CHARS:  # the user approves what they saw, all of it
                run_command(turn, command, user_message_id, refusal=BODY_UNSHOWN)
                continue
            if would_run(tool, command):
                return ask_approval(turn, tool, command)
        routed = run_command(turn, command, user_message_id, refusal=BODY_CUT if outcome.cut else None)
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


def read_history(conn: DbConnection, session_id: str, limit: int) -> list[Message]:
    """The session's recent messages, read before anything of the turn is stored: a database
    that refuses the read (locked, gone) fails the turn as StorageUnavailable (a 503 or a
    terminal `error` event), as a refused write does, not as a crash."""
    try:
        return recent_messages(conn, session_id, limit)
    except StorageError as error:
        raise StorageUnavailable(f"the database refused a read: {error}", None) from error


@dataclass(frozen=True)
class Fork:
    """Where a new version starts (SPEC 17, edit and regenerate): the branch on screen is cut
    back to `leaf_id` (None: before the first message) before the turn reads or stores
    anything, so the old version stays in the tree and the turn sees only the branch it makes."""

    leaf_id: int | None


def start_branch(conn: DbConnection, session_id: str, fork: Fork | None, retry_of: Message | None) -> None:
    """Move the session's active leaf to the fork, and drop the failure mark of a message
    answered again (a new failure marks it again)."""
    try:
        if fork is not None:
            set_active_leaf(conn, session_id, fork.leaf_id)
        if retry_of is not None:
            set_turn_error(conn, retry_of.id, None)
    except StorageError as error:
        raise StorageUnavailable(f"the database refused a write: {error}", None) from error


def run_turn(
    services: TurnServices,
    conn: DbConnection,
    *,
    user_id: int,
    session_id: str,
    text: str,
    user_meta: dict[str, Any] | None = None,
    emit: EventSink = ignore_event,
    cancel: CancelToken = NEVER,
    retry_of: Message | None = None,
    fork: Fork | None = None,
) -> TurnResult:
    """Run one validated user turn in an owned session (validation is the caller's, 6.1).

    `retry_of`: a stored user message answered again instead of being stored a second time:
    the session's last message whose turn failed (the caller checked), or, with `fork` at
    that message, the message a regenerate answers anew. `fork`: see `Fork`; run under the
    caller's claim on the session, before anything is read.
    """
    start_branch(conn, session_id, fork, retry_of)
    history = read_history(conn, session_id, services.settings.context_messages)  # 6.2
    turn = _Turn(services, conn, user_id, session_id, emit, history, cancel)
    emit("turn.started", {"session_id": session_id, **({"retry_of": retry_of.id} if retry_of else {})})
    if retry_of is not None:
        turn.stored.append(retry_of)  # the turn's user message, already in the history
        return guarded(turn, retry_of.id, lambda: run_passes(turn, retry_of.id, first_pass=0))
    try:
        user_message = turn.store("user", text, user_meta)  # stored first: never lost (6.4)
    except StorageError as error:
        raise StorageUnavailable(f"the database refused a write: {error}", None) from error
    return guarded(turn, user_message.id, lambda: run_passes(turn, user_message.id, first_pass=0))


def rounds_used(history: list[Message]) -> tuple[int, int | None]:
    """(tool rounds since the last user message, that message's id)."""
    rounds = 0
    for message in reversed(history):
        if message.role == "user":
            return rounds, message.id
        if is_tool_role(message.role) and ToolMeta.of(message).kind != UI_RESULT:
            rounds += 1
    return rounds, None


def continue_turn(
    services: TurnServices,
    conn: DbConnection,
    *,
    user_id: int,
    session_id: str,
    result_role: str,
    result_content: str,
    result_meta: ToolMeta,
    emit: EventSink = ignore_event,
    cancel: CancelToken = NEVER,
) -> TurnResult:
    """Store an interactive tool's result and go on with the user turn it belongs to.

    The rounds that turn already used count against `MAX_TOOL_ROUNDS` (SPEC 8), so
    answering widgets can never extend a turn past the cap.
    """
    history = read_history(conn, session_id, services.settings.context_messages)
    turn = _Turn(services, conn, user_id, session_id, emit, history, cancel)
    emit("turn.started", {"session_id": session_id, "continuation": True})
    used, user_message_id = rounds_used(turn.history)

    def passes() -> TurnResult:
        turn.store(result_role, result_content, ToolMeta.model_validate({**result_meta.stored(), "kind": UI_RESULT}))
        return run_passes(turn, user_message_id or 0, first_pass=used)

    return guarded(turn, user_message_id, passes)
