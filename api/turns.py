"""Running a turn for HTTP: claim the session, run the turn on a worker, answer JSON or SSE.

`POST /chat`, `POST /api/ai/tool-result` and `POST /activities/generate` all hand a
`TurnWork` (a function of a connection, an event sink and the turn's cancel token that
returns the turn's JSON answer) to `TurnRunner.start`. The session is claimed first (one
turn at a time: 409 `turn_in_progress`), then the work runs on one of a bounded pool of
worker threads (each keeps its SQLite connection), never on the request's thread: closing
the request never stops the turn, and waiting for it costs the asyncio server no thread.

Whatever happens, the turn ends with exactly one terminal event: `done` (the answer), or
`error` carrying the HTTP status, the error body and, when it was stored, the
`user_message_id` (502 `provider_unavailable`, 503 `storage_unavailable` when the database
refused a write, 500 `internal_error` for anything else).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flask import Response
from pydantic import BaseModel, Field

from api.database import release_db
from api.errors import ApiError
from api.live import EventStreamBody, TurnOutcomeBody, live_response, wants_event_stream
from api.openapi.models import MessageOut
from api.services import services
from foundation.cancellation import CancelToken
from live import Live
from live.follow import FollowPlan
from live.turns import TurnInProgress, TurnLease, TurnOutcome
from pipeline.turn import EventSink, ProviderUnavailable, StorageUnavailable, ToolSummary, TurnFailed, TurnResult
from storage.connection import DbConnection, Store

log = logging.getLogger("turns")

TurnWork = Callable[[DbConnection, EventSink, CancelToken], dict[str, Any]]


class TurnPayload(BaseModel):
    """What a finished turn produced: the stored rows in order and the text the user sees."""

    session_id: str
    reply: str
    messages: list[MessageOut] = Field(description="the rows this turn stored, in order")
    tool: ToolSummary | None = Field(description="the turn's tool step, if any; `code` only when it failed")
    stopped: bool = Field(description="true when the user stopped the turn (POST /sessions/<id>/cancel)")


class TurnAnswer(TurnPayload):
    """The 200 answer of a turn (`POST /chat`, `POST /api/ai/tool-result`), also the data of its `done` event."""

    turn_id: str


def turn_payload(result: TurnResult) -> dict[str, Any]:
    """The JSON answer of a finished chat turn (also the `done` event's data), without its
    `turn_id`: a `TurnPayload`, built as the plain dict it dumps to. Every field comes from
    the turn's own typed values (stored rows, a `ToolSummary`), so validating them again cost
    a tenth of the turn's own work for nothing; tests/api/test_api.py checks the shape against
    the model."""
    return {
        "session_id": result.session_id,
        "reply": result.reply,
        "messages": [message.public() for message in result.messages],
        "tool": result.tool.model_dump(exclude_none=True) if result.tool else None,  # `code` only when set
        "stopped": result.stopped,
    }


def failure_outcome(error: Exception, session_id: str) -> TurnOutcome:
    extra: dict[str, Any] = {"session_id": session_id}
    if isinstance(error, TurnFailed) and error.user_message_id is not None:
        extra["user_message_id"] = error.user_message_id
    if isinstance(error, ProviderUnavailable):
        failure = ApiError(502, "provider_unavailable", error.public_message, extra=extra)
    elif isinstance(error, StorageUnavailable):
        failure = ApiError(
            503,
            "storage_unavailable",
            "the database refused a write (it is locked, full or "
            "read-only); what was stored before is kept, retry later",
            extra=extra,
        )
    else:
        log.error("turn failed in session %s", session_id, exc_info=error)
        failure = ApiError(500, "internal_error", "the turn failed on the server; what was stored is kept", extra=extra)
    return failure.status_code, failure.to_dict()


class TurnRunner:
    """Starts turns on a bounded pool of worker threads; one instance per app."""

    def __init__(self, database: Store, live: Live, workers: int) -> None:
        self.database = database
        self.live = live
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="turn")

    def claim(self, session_id: str, kind: str = "chat") -> TurnLease:
        """Reserve the session for a new turn, or answer 409 with the running turn's id."""
        try:
            return self.live.turns.claim(session_id, kind, self.live.bus.position())
        except TurnInProgress as busy:
            raise ApiError(
                409,
                "turn_in_progress",
                "this chat is still answering; wait for it or stop it (POST /sessions/<id>/cancel)",
                extra={"turn_id": busy.turn_id},
            ) from busy

    def start(self, lease: TurnLease, work: TurnWork) -> TurnLease:
        lease.started = True
        self._executor.submit(self._run, lease, work)
        return lease

    def _run(self, lease: TurnLease, work: TurnWork) -> None:
        bus, session_id = self.live.bus, lease.session_id

        def emit(name: str, data: dict[str, Any]) -> None:  # the terminal event, below, is published after these
            bus.post(session_id, name, {"turn_id": lease.turn_id, **data})

        outcome: TurnOutcome
        try:
            payload = work(self.database.thread_connection(), emit, lease.token)
            outcome = 200, {"turn_id": lease.turn_id, **payload}
        except Exception as error:  # every failure ends the turn with a terminal event
            status, body = failure_outcome(error, session_id)
            outcome = status, {"turn_id": lease.turn_id, **body}
        finally:
            self.database.release_thread_connection()  # PostgreSQL: back to the pool
        status, body = outcome
        name, data = ("done", body) if status == 200 else ("error", {**body, "status": status})
        self.live.turns.finish(lease, lambda: bus.publish(session_id, name, data), outcome)


def runner() -> TurnRunner:
    return services().turn_runner


def answer_turn(lease: TurnLease, work: TurnWork) -> Response:
    """Start the claimed turn and answer: its events as SSE, or its JSON when it ends."""
    turns = runner()
    release_db()  # the turn takes its own connection; this request holds none while it waits
    turns.start(lease, work)
    if wants_event_stream():
        plan = FollowPlan(session_id=lease.session_id, after=lease.start_cursor, turn_id=lease.turn_id, only_turn=True)
        return live_response(EventStreamBody(turns.live.bus, plan))
    return live_response(TurnOutcomeBody(lease))
