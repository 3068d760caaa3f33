"""What a tool is: typed input, typed output, a handler, and its command binding.

A handler receives its validated input model and a `ToolContext`, and returns its output
model. When it cannot do the job it raises `ToolFailure(code, message)`; the runner in
`tools/runner.py` turns that (and any unexpected exception) into a `ToolResult` value, so a
failing tool is data shown to the model, never a crash.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from foundation.cancellation import NEVER, CancelToken

if TYPE_CHECKING:
    from bounded.pool import WorkerPool
    from config.settings import Settings
    from judge.service import Judge
    from observe.telemetry import Telemetry
    from providers import FallbackChain
    from storage.connection import DbConnection, Store


ProgressSink = Callable[[float, float | None, str | None], None]  # (progress, total, message)

FIX_HINT = "Fix the command and try again."  # the model's cue to retry a refused command


class ErrorCode(StrEnum):
    """Codes a tool result can carry; the message says how to fix the call."""

    NOT_FOUND = "NOT_FOUND"
    VALIDATION_FAILED = "VALIDATION_FAILED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    TIMEOUT = "TIMEOUT"
    UPSTREAM_ERROR = "UPSTREAM_ERROR"
    NOT_CONFIGURED = "NOT_CONFIGURED"
    UNKNOWN_COMMAND = "UNKNOWN_COMMAND"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    CANCELLED = "CANCELLED"  # the user stopped the turn while the tool ran
    BUSY = "BUSY"  # a shared pool (sandbox workers, the judge) had no place in time: retry later (SPEC 12)
    # learner task tools (SPEC section 10)
    INVALID_STATE = "INVALID_STATE"
    BLOCKED = "BLOCKED"
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    # interactive tool results (SPEC section 8)
    TOOL_EXECUTION_FAILED = "TOOL_EXECUTION_FAILED"
    INVALID_TOOL_RESULT = "INVALID_TOOL_RESULT"
    PROFILE_UPDATE_FAILED = "PROFILE_UPDATE_FAILED"
    DECLINED = "DECLINED"  # the user declined to run the command (SPEC 8, Approval)


class ToolFailure(Exception):
    """Raised by a handler to report an expected failure with a code and a fix hint.

    `message` is written for a person: what went wrong and how to fix it, the same words
    whoever called (a chat command, `POST /tools/<name>`). `hint` is advice for the model
    only ("explain the code instead"), shown in the chat contract and nowhere else.
    """

    def __init__(self, code: ErrorCode, message: str, hint: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.hint = hint


class BindingError(Exception):
    """A command's text cannot be read as the tool's input (e.g. arguments that are not JSON);
    the router answers it as a VALIDATION_FAILED result with the usage."""


class ToolInput(BaseModel):
    """Base of every tool input: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class ToolOutput(BaseModel):
    """Base of every tool output: a typed value that can render itself for the model."""

    model_config = ConfigDict(frozen=True)

    def render(self) -> str:
        """Plain text shown to the model (and the user) inside the result block."""
        return self.model_dump_json(indent=2)


@dataclass(frozen=True)
class ToolContext:
    """Everything a handler may touch, all scoped to one user and passed in explicitly.

    The app's long-lived services are typed fields, None where this server (or a test, the
    CLI) has none: each tool says what it does without one (NOT_CONFIGURED, a one-off pool).
    """

    conn: DbConnection
    database: Store
    settings: Settings
    user_id: int
    session_id: str | None = None
    turn_message_id: int | None = None
    judge: Judge | None = None  # /run_code and task checks; None when Docker is off or JUDGE_ENABLED=0
    vision: FallbackChain | None = None  # /image_analyze asks this chain about a stored image
    bounded: WorkerPool | None = None  # the app's warm workers for untrusted SQL, regexes and pages
    deadline: float | None = None  # time.monotonic() value; set by the runner from Tool.timeout_s
    cancel: CancelToken = NEVER  # the turn's token: a blocking step registers how to interrupt itself
    telemetry: Telemetry | None = None  # the app's spans and counts (None: a test's or the CLI's context)
    progress: ProgressSink | None = None  # a long call's progress, as `tool.progress` events of the turn
    # False: this call runs only because its tool's approval condition said it changes nothing
    # (SPEC 8; `Approval.when`): a tool whose engine then finds a write refuses it instead
    writes_allowed: bool = True

    def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Tell whoever follows this call how far it got (a chat turn's stream; nobody otherwise)."""
        if self.progress is not None:
            self.progress(progress, total, message)

    def storage_span(self, operation: str) -> AbstractContextManager[object]:
        """A span around a storage call that matters (a model's SQL, a search), when traced."""
        if self.telemetry is None:
            return nullcontext()
        return self.telemetry.storage(operation, self.database.dialect)

    def remaining(self, cap: float | None = None) -> float:
        """Seconds left before this call's deadline (at most `cap`); raises TIMEOUT at 0.

        Handlers pass this as the timeout of every blocking step (HTTP, regex, subprocess),
        so a tool never outlives its deadline by more than one step.
        """
        left = float("inf") if self.deadline is None else self.deadline - time.monotonic()
        if left <= 0:
            raise ToolFailure(ErrorCode.TIMEOUT, "the tool ran out of time; try a smaller request.")
        return left if cap is None else min(left, cap)


class Need(StrEnum):
    """Something a tool needs to be able to succeed, in this deployment or this session: a
    turn's command list offers a tool only where all of its needs are met (SPEC 6.2)."""

    JUDGE = "judge"  # a Docker judge answers (deployment)
    IMAGE_PROVIDER = "image_provider"  # IMAGE_PROVIDER is configured (deployment)
    IMAGE = "image"  # an image is in the context window (session)
    COURSE = "course"  # learner tasks were imported (deployment, changes with `import-tasks`)


SESSION_NEEDS = frozenset({Need.IMAGE})  # the needs that change from one turn to the next


@dataclass(frozen=True)
class CommandBinding:
    """How a `/command` line maps onto the tool's input fields.

    `args_field` receives the text after the command name on the first line, `body_field`
    the lines after it (one surrounding code fence removed). A tool may accept its main
    value from either place (e.g. `/memory_sql` takes SQL on the first line or in the body):
    `body_fallback_to_args` says the body fills `args_field` when the first line is empty.
    """

    name: str
    usage: str
    example: str
    args_field: str | None = None
    body_field: str | None = None
    body_fallback_to_args: bool = False
    parse: Callable[[str, str], dict[str, Any]] | None = None  # (args, body) -> input, for several fields
    request: str = ""  # what a user would say that `example` answers (the prompt's demonstrations)
    # False for a command whose argument can be any sentence the user wrote (`/remember …`, `/imagine …`):
    # shown as a demonstration, it teaches a small model to put any message after it (issue 33)
    demonstrates: bool = True

    @property
    def takes_body(self) -> bool:
        """Whether the lines after the command line matter (else the stream stops after it)."""
        return self.body_field is not None or self.parse is not None


@dataclass(frozen=True)
class ToolHints:
    """What a tool does to the world, told to MCP hosts as its `annotations` (SPEC 14).

    A host decides from these whether to ask its user before a call, so each tool declares
    them truthfully beside itself. The defaults are MCP's own, the cautious reading: a tool
    that says nothing may change and destroy things, differently each time, out in the world.
    """

    read_only: bool = False  # changes nothing (the user's data, files, the world)
    destructive: bool = True  # may overwrite or delete (meaningful only when not read-only)
    idempotent: bool = False  # the same call twice changes nothing more than once
    open_world: bool = True  # reaches beyond this server (the web, a weather service)


READ_ONLY_LOCAL = ToolHints(read_only=True, destructive=False, idempotent=True, open_world=False)
READ_ONLY_WEB = ToolHints(read_only=True, destructive=False, idempotent=False, open_world=True)


ToolOrigin = Literal["builtin", "mcp"]  # where a tool comes from: this product, or an MCP server (SPEC 14)


@dataclass(frozen=True)
class Approval:
    """Whether a call of this tool asks its user before it runs (SPEC 8, Approval), declared
    beside the tool: `never`, `always`, or `when` a condition over the validated input holds.

    The condition gets the input and the call's context, so it can ask the engine that will run
    the call (`/memory_sql`: does the database classify this statement as a write?); it raises
    `ToolFailure` for a call the engine would refuse anyway, which is then refused at once,
    without asking. `condition` names it in `TOOL_APPROVAL` (`memory_sql:update`). Whether the
    declaration counts is the operator's policy (`config/approval.py`), read by
    `pipeline/approval.py`, the one place that decides.
    """

    mode: Literal["never", "always", "when"] = "never"
    condition: str = ""
    holds: Callable[[Any, ToolContext], bool] | None = None

    @classmethod
    def when(cls, condition: str, holds: Callable[[Any, ToolContext], bool]) -> Approval:
        return cls("when", condition, holds)


NEVER_ASKS = Approval()
ASKS = Approval("always")


InputT = TypeVar("InputT", bound=ToolInput)
OutputT = TypeVar("OutputT", bound=ToolOutput)


@dataclass(frozen=True)
class Tool(Generic[InputT, OutputT]):
    """One tool: a unit of input model, output model, handler, description and binding."""

    name: str
    description: str
    input_model: type[InputT]
    output_model: type[OutputT]
    handler: Callable[[InputT, ToolContext], OutputT]
    result_role: str
    command: CommandBinding | None = None
    terminal_on_success: bool = False
    timeout_s: float = 30.0
    error_style: Literal["api", "task"] = "api"  # how POST /tools/<name> shapes an error body
    interactive: bool = False  # the handler builds a widget; the turn waits for the user's answer
    needs: frozenset[Need] = frozenset()  # what must be there for the tool to succeed (the turn's catalog)
    budget: str | None = None  # the RATE_LIMITS budget a direct `POST /tools/<name>` spends (SPEC 12)
    annotations: ToolHints | None = (
        None  # its hints (served over `/mcp` with them; an MCP server's tool: the server's); None: not served over /mcp
    )
    approval: Approval = NEVER_ASKS  # whether a call the model writes asks its user first (SPEC 8)
    origin: ToolOrigin = "builtin"

    def function_schema(self) -> dict[str, Any]:
        """OpenAI-compatible function schema derived from the input model, never by hand."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_model.model_json_schema(),
            },
        }


class FieldProblem(BaseModel):
    """One invalid input field, as `POST /tools/<name>` reports it in `error.details`
    (the shape of every other 400 `invalid_request` of the HTTP API)."""

    model_config = ConfigDict(frozen=True)

    field: str
    message: str


class ToolResult(BaseModel):
    """The outcome of one tool call, stored in a message's `meta` and shown to the model."""

    model_config = ConfigDict(frozen=True)

    tool: str
    ok: bool
    output: dict[str, Any] | None = None
    text: str = ""
    error_code: str | None = None
    message: str = ""  # for a person: the same words over HTTP, in the UI and in the contract
    hint: str = ""  # for the model only: usage, an example, what to do instead (never over HTTP)
    details: list[FieldProblem] | None = None  # which input fields were wrong, when validation failed
    duration_ms: float = 0.0

    @classmethod
    def failure(
        cls,
        tool: str,
        code: ErrorCode | str,
        message: str,
        duration_ms: float = 0.0,
        *,
        hint: str = "",
        details: list[FieldProblem] | None = None,
    ) -> ToolResult:
        return cls(
            tool=tool,
            ok=False,
            error_code=str(code),
            message=message,
            hint=hint,
            details=details,
            duration_ms=duration_ms,
        )

    def display_text(self) -> str:
        """What goes inside the contract block: the rendered output or an `Error:` line
        (the person's message, then the model's hint)."""
        if self.ok:
            return self.text
        return " ".join(part for part in (f"Error: {self.error_code}: {self.message}", self.hint) if part)
