"""The server-sent events of SPEC 7, named once: every name, and the payload each carries.

`EventName` is what the pipeline, the generation job, the live bus, the HTTP streams and `/v1`'s
translator use; `tests/live/test_event_names.py` holds `static/js` to exactly these names. A
payload is a `TypedDict` (a type for readers and mypy, free at run time); every event but
`heartbeat` also carries its `turn_id`, added by the turn's runner (`live/desk.py`). New events
and fields may be added; existing ones never change meaning.

This module imports nothing of the product: it is the contract every floor shares.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NotRequired, TypedDict


class EventName(StrEnum):
    TURN_STARTED = "turn.started"
    TURN_QUEUED = "turn.queued"  # the user's share of turn workers is in use: it starts when one of theirs ends
    PROVIDER_REQUEST = "provider.request"
    PROVIDER_WAITING = "provider.waiting"  # no first token yet: said every second while the model is waited for
    PROVIDER_RESPONSE = "provider.response"
    PASS_DECIDED = "pass.decided"  # a first pass read the model's probabilities first (SPEC 6.11, `LLM_DECIDE`)
    COMMAND_DETECTED = "command.detected"
    APPROVAL_REQUESTED = "approval.requested"
    TOOL_STARTED = "tool.started"
    TOOL_PROGRESS = "tool.progress"
    TOOL_FINISHED = "tool.finished"
    ANSWER_DELTA = "answer.delta"
    ANSWER_RESET = "answer.reset"
    MESSAGE_STORED = "message.stored"
    JOB_STARTED = "job.started"  # problem generation (SPEC 9)
    PROBLEM_STARTED = "problem.started"
    PROBLEM_REJECTED = "problem.rejected"
    PROBLEM_STORED = "problem.stored"
    PROBLEM_FAILED = "problem.failed"
    REPLAY_GAP = "replay.gap"
    HEARTBEAT = "heartbeat"
    DONE = "done"
    ERROR = "error"


TERMINAL_EVENTS = frozenset({EventName.DONE, EventName.ERROR})
TEXT_EVENTS = frozenset({EventName.DONE, EventName.ERROR, EventName.ANSWER_DELTA})  # the only ones that may carry text


class TurnStarted(TypedDict):
    session_id: str
    retry_of: NotRequired[int]
    continuation: NotRequired[bool]


class ProviderRequest(TypedDict):
    attempt: int
    message_count: int
    # `pass` is a keyword in Python: `pass` (int) is in every provider and answer event too


class ProviderWaiting(TypedDict):
    """A call of pass `pass` has no text yet: which model is waited for, and how long (whole seconds)."""

    attempt: int
    provider: str
    model: str
    waited_s: int


class ProviderResponse(TypedDict):
    attempt: int
    provider: str
    ok: bool
    failure: str | None
    elapsed_ms: float
    first_text_ms: float | None
    request_bytes: int
    response_bytes: int
    stopped_early: bool


class Named(TypedDict):
    """`command.detected`, `tool.started`: the command's name only."""

    name: str


class ApprovalRequested(TypedDict):
    name: str
    tool_call_id: str


class ToolProgress(TypedDict):
    name: str
    progress: float
    total: float | None
    message: str | None


class ToolFinished(TypedDict):
    name: str
    ok: bool
    code: str | None
    duration_ms: float


class AnswerDelta(TypedDict):
    text: str


class MessageStored(TypedDict):
    id: int
    role: str


class ReplayGap(TypedDict):
    after: int
    oldest: int


class JobStarted(TypedDict):
    activity_id: str
    count: int
    language: str


class ProblemStarted(TypedDict):
    index: int
    attempt: int


class PassDecided(TypedDict):
    decision: str  # "command" or "prose" (never which command: the reply names it when it is one)
    reads: int  # the probability reads made (SPEC 6.11: apart from the pass's calls)
    elapsed_ms: float


class ProblemRejected(TypedDict):
    index: int
    attempt: int
    code: str


class ProblemStored(TypedDict):
    index: int
    problem_id: str
    title: str


class ProblemFailed(TypedDict):
    index: int
    attempts: int


PAYLOADS: dict[EventName, type[Any] | None] = {
    EventName.TURN_STARTED: TurnStarted,
    EventName.TURN_QUEUED: None,
    EventName.PROVIDER_REQUEST: ProviderRequest,
    EventName.PROVIDER_WAITING: ProviderWaiting,
    EventName.PROVIDER_RESPONSE: ProviderResponse,
    EventName.PASS_DECIDED: PassDecided,
    EventName.COMMAND_DETECTED: Named,
    EventName.APPROVAL_REQUESTED: ApprovalRequested,
    EventName.TOOL_STARTED: Named,
    EventName.TOOL_PROGRESS: ToolProgress,
    EventName.TOOL_FINISHED: ToolFinished,
    EventName.ANSWER_DELTA: AnswerDelta,
    EventName.ANSWER_RESET: None,
    EventName.MESSAGE_STORED: MessageStored,
    EventName.JOB_STARTED: JobStarted,
    EventName.PROBLEM_STARTED: ProblemStarted,
    EventName.PROBLEM_REJECTED: ProblemRejected,
    EventName.PROBLEM_STORED: ProblemStored,
    EventName.PROBLEM_FAILED: ProblemFailed,
    EventName.REPLAY_GAP: ReplayGap,
    EventName.HEARTBEAT: None,
    EventName.DONE: None,  # the turn's answer: `api/turns.TurnAnswer`
    EventName.ERROR: None,  # the turn's error body and `status`
}
"""Each event's payload type (beyond `turn_id` and a pass's `pass`), None where it is only
`turn_id` or a model of the layer that builds it (a turn's answer, its error body)."""
