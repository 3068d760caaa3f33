"""A turn over HTTP: its answer's shape, its outcome as a status and JSON, its SSE or JSON reply.

The turn itself runs in `live/desk.py` (`TurnDesk`: claim the session, run the work on a
fair worker, end with one terminal event); this module says what that means over HTTP:

- a session that is answering another turn: 409 `turn_in_progress` with its `turn_id`
  (`TurnInProgress`, mapped by the handler `init_app` installs);
- a finished turn: 200 with its answer (`TurnAnswer`), or the failure's status and error body
  carrying `session_id` and, when it was stored, `user_message_id` (502 `provider_unavailable`,
  503 `storage_unavailable` when the database refused a write, 500 `internal_error`), the
  same body with its `status` as the `error` event's data (`error_event`);
- `turn_work`: the work of a turn begun by a `TurnStart` (`pipeline/starts.py`), the same for
  every view;
- `answer_turn`: start the claimed turn and answer its events as SSE, or its JSON when it ends.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import Future
from typing import Any

from flask import Flask, Response, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, Field

from api.database import release_db
from api.errors import ApiError
from api.live import ASGIMessage, EventStreamBody, Receive, Send, _headers, live_response, wants_event_stream
from api.openapi.models import MessageOut
from api.services import services
from foundation.cancellation import CancelToken
from live.desk import Claim, TurnDesk, TurnWork
from live.follow import FollowPlan
from live.turns import FailureCode, TurnDone, TurnFailure, TurnInProgress, TurnLease, TurnOutcome
from pipeline.results import EventSink, StopReason, ToolSummary, TurnResult, TurnServices
from pipeline.starts import TurnStart
from pipeline.turn import run_turn
from storage.connection import DbConnection

FAILURE_STATUS: dict[FailureCode, int] = {
    "provider_unavailable": 502,
    "storage_unavailable": 503,
    "internal_error": 500,
}


class TurnPayload(BaseModel):
    """What a finished turn produced: the stored rows in order and the text the user sees."""

    session_id: str
    reply: str
    messages: list[MessageOut] = Field(description="the rows this turn stored, in order")
    tool: ToolSummary | None = Field(description="the turn's tool step, if any; `code` only when it failed")
    stopped: bool = Field(
        description="true when the turn was stopped: by its user (POST /sessions/<id>/cancel) or its time limit"
    )
    stop_reason: StopReason | None = Field(
        default=None, description="who stopped it, when `stopped`: `user`, or `time_limit` (`MAX_TURN_S`)"
    )


class TurnAnswer(TurnPayload):
    """The 200 answer of a turn (`POST /chat`, `POST /api/ai/tool-result`), also the data of its `done` event."""

    turn_id: str


def turn_payload(result: TurnResult) -> dict[str, Any]:
    """The JSON answer of a finished chat turn (also the `done` event's data), without its
    `turn_id`: a `TurnPayload`, built as the plain dict it dumps to. Every field comes from
    the turn's own typed values (stored rows, a `ToolSummary`), so it is not validated again;
    tests/api/test_api.py checks the shape against the model."""
    return {
        "session_id": result.session_id,
        "reply": result.reply,
        "messages": [message.public() for message in result.messages],
        "tool": result.tool.model_dump(exclude_none=True) if result.tool else None,  # `code` only when set
        "stopped": result.stopped,
        **({"stop_reason": result.stop_reason} if result.stopped else {}),
    }


def turn_work(services: TurnServices, user_id: int, session_id: str, start: TurnStart) -> TurnWork:
    """The work of one turn begun by `start`, as every view hands it to its claim."""

    def work(conn: DbConnection, emit: EventSink, cancel: CancelToken) -> dict[str, Any]:
        result = run_turn(services, conn, start, user_id=user_id, session_id=session_id, emit=emit, cancel=cancel)
        return turn_payload(result)

    return work


def failure_answer(failure: TurnFailure) -> tuple[int, dict[str, Any]]:
    extra: dict[str, Any] = {"session_id": failure.session_id}
    if failure.user_message_id is not None:
        extra["user_message_id"] = failure.user_message_id
    error = ApiError(FAILURE_STATUS[failure.code], failure.code, failure.message, failure.details, extra=extra)
    return error.status_code, {"turn_id": failure.turn_id, **error.to_dict()}


def http_answer(outcome: TurnOutcome) -> tuple[int, dict[str, Any]]:
    """The status and JSON body that answer a finished turn."""
    if isinstance(outcome, TurnDone):
        return 200, outcome.answer
    return failure_answer(outcome)


def error_event(failure: TurnFailure) -> dict[str, Any]:
    """The data of the `error` event that ends a failed turn: its JSON answer and status."""
    status, body = failure_answer(failure)
    return {**body, "status": status}


def turn_in_progress(busy: TurnInProgress) -> ResponseReturnValue:
    error = ApiError(
        409,
        "turn_in_progress",
        "this chat is still answering; wait for it or stop it (POST /sessions/<id>/cancel)",
        extra={"turn_id": busy.turn_id},
    )
    return jsonify(error.to_dict()), error.status_code


def init_app(app: Flask) -> None:
    app.register_error_handler(TurnInProgress, turn_in_progress)


def desk() -> TurnDesk:
    return services().desk


async def turn_outcome(lease: TurnLease) -> tuple[int, dict[str, Any]]:
    """The turn's status and JSON answer, awaited on the event loop. The outcome is done already
    when the server waited for the body's `ready` (the usual case): then it is taken as it is,
    since wrapping a done future still costs a wake-up of the loop."""
    outcome = lease.outcome
    return http_answer(outcome.result() if outcome.done() else await asyncio.wrap_future(outcome))


class TurnOutcomeBody:
    """The JSON answer of a turn, written when the turn ends (status decided then)."""

    placeholder_mimetype = "application/json"

    def __init__(self, lease: TurnLease) -> None:
        self.lease = lease

    @property
    def ready(self) -> Future[Any]:
        return self.lease.outcome

    def sync_response(self) -> Response:
        status, payload = http_answer(self.lease.outcome.result())
        response = jsonify(payload)
        response.status_code = status
        return response

    async def respond(self, start: ASGIMessage, send: Send, receive: Receive) -> None:
        status, payload = await turn_outcome(self.lease)
        body = json.dumps(payload, separators=(",", ":")).encode() + b"\n"
        headers = _headers(start, (b"content-length", b"content-type")) + [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def answer_turn(claim: Claim, work: TurnWork) -> Response:
    """Start the claimed turn and answer: its events as SSE, or its JSON when it ends."""
    release_db()  # the turn takes its own connection; this request holds none while it waits
    lease = claim.start(work)
    if wants_event_stream():
        plan = FollowPlan(session_id=lease.session_id, after=lease.start_cursor, turn_id=lease.turn_id, only_turn=True)
        return live_response(EventStreamBody(claim.desk.live.bus, plan))
    return live_response(TurnOutcomeBody(lease))
