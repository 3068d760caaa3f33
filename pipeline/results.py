"""What a turn needs and what it ends with: its services, its result, its failures.

`pipeline/turn.py` runs the turn; these are the values around it that the layers above read
(`live/desk.py` maps the failures to outcomes, `api/turns.py` the result to JSON), so they
live apart from the loop and its private state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from config.settings import Settings
from foundation.cancellation import NEVER, CancelToken, Watchdog
from foundation.events import EventName
from llm.hints import USER_WORDS, Reason, fix_hint, reason_of, what_failed
from observe.telemetry import Telemetry
from pipeline.context import ImageLoader
from pipeline.prompt import PromptBook
from providers import Completion, FallbackChain
from storage.connection import DbConnection, Store
from storage.messages import Message
from tools.base import ProgressSink, ToolContext
from tools.registry import ToolRegistry

if TYPE_CHECKING:
    from bounded.pool import WorkerPool
    from judge.service import Judge

EventSink = Callable[[EventName, dict[str, Any]], None]  # a turn's events, `turn_id` added by its runner
StopReason = Literal["user", "time_limit"]
TIME_LIMIT = "the turn reached its time limit (MAX_TURN_S)"  # the cancel reason of the turn's own limit


def ignore_event(name: EventName, data: dict[str, Any]) -> None:
    """Default event sink: events are optional for callers that do not stream."""


def stop_reason(cancel: CancelToken) -> StopReason:
    """Who stopped a cancelled turn: its time limit, or its user (a Stop, a lost claim)."""
    return "time_limit" if cancel.reason == TIME_LIMIT else "user"


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
    def reason(self) -> Reason:
        """Which of the four things a user is told happened (`llm/hints.py`)."""
        completion = self.completion
        return reason_of(completion.failure, status_code=completion.status_code, cause=completion.cause)

    @property
    def public_message(self) -> str:
        """What the user reads, in their words: what happened and that the message was kept;
        never a setting, an address or a command to run (those are `operator_message`'s)."""
        return USER_WORDS[self.reason]

    @property
    def operator_message(self) -> str:
        """What the log says: what failed (which timer, which HTTP status, the provider's own
        detail) and what an operator can do about it (the same fix as `/health`)."""
        detail = self.completion
        kind = detail.failure.value if detail.failure else "no answer"
        if detail.cause is not None:
            kind = f"{kind} after {detail.cause.value}"
        what = what_failed(
            detail.failure,
            status_code=detail.status_code,
            timeout_s=self.timeout_s,
            idle_timeout_s=self.idle_timeout_s,
        )
        fix = fix_hint(detail.provider, detail.model, detail.cause or detail.failure)
        return f"{what} ({detail.provider}/{detail.model}: {kind}: {detail.detail or 'no detail'}); to fix it, {fix}"


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
    stopped: bool = False  # cancelled (7a.5): by its user, or by its time limit
    stop_reason: StopReason | None = None


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
    # says `provider.waiting` of every turn waiting for a first token (one thread, while any waits)
    waiting: Watchdog = field(default_factory=lambda: Watchdog("provider-waiting"))


def tool_context(
    services: TurnServices,
    conn: DbConnection,
    user_id: int,
    session_id: str | None = None,
    turn_message_id: int | None = None,
    cancel: CancelToken = NEVER,
    progress: ProgressSink | None = None,
    writes_allowed: bool = True,
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
        writes_allowed=writes_allowed,
    )
