"""Running a turn for HTTP: its events on the session's bus, a JSON or SSE answer.

Both `POST /chat` and `POST /api/ai/tool-result` hand a `TurnWork` (a function of a
connection and an event sink that runs the pipeline) to `answer_turn`. A plain client gets
the JSON answer; a client that accepts `text/event-stream` gets the turn's events as they
happen, ending with `done` (the same JSON) or a terminal `error`.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from typing import Any

from flask import Response, current_app, jsonify

from api.database import get_db
from api.errors import ApiError
from api.sse import event_stream, sse_response, wants_event_stream
from events.bus import EventBus
from pipeline.turn import EventSink, ProviderUnavailable, TurnResult, TurnServices

TurnWork = Callable[[sqlite3.Connection, EventSink], TurnResult]


def turn_payload(result: TurnResult) -> dict[str, Any]:
    return {
        "session_id": result.session_id,
        "reply": result.reply,
        "messages": [message.public() for message in result.messages],
        "tool": result.tool.model_dump(exclude_none=True) if result.tool else None,
    }


def run_and_publish(bus: EventBus, conn: sqlite3.Connection, session_id: str, work: TurnWork) -> tuple[int, dict[str, Any]]:
    """Run `work` with events on the bus; end with `done` or a terminal `error` carrying the answer."""

    def emit(name: str, data: dict[str, Any]) -> None:
        bus.publish(session_id, name, data)

    try:
        result = work(conn, emit)
    except ProviderUnavailable as failure:
        detail = failure.completion
        kind = detail.failure.value if detail.failure else "no answer"
        error = ApiError(
            502,
            "provider_unavailable",
            f"the model provider did not answer ({detail.provider}: {kind}); your message was kept, retry later",
            extra={"user_message_id": failure.user_message_id, "session_id": session_id},
        )
        bus.publish(session_id, "error", {**error.to_dict(), "status": 502})
        return 502, error.to_dict()
    payload = turn_payload(result)
    bus.publish(session_id, "done", payload)
    return 200, payload


def stream_turn(services: TurnServices, bus: EventBus, session_id: str, work: TurnWork) -> Iterator[str]:
    """Run the turn on its own thread (with its own connection) and stream its events.

    The subscription starts at the bus position before the turn, so no event of this turn
    is missed; the thread is not a daemon, so a shutting-down server finishes the turn and
    stores its messages before exiting.
    """
    after = bus.last_id(session_id)

    def run() -> None:
        with services.database.connection() as conn:
            run_and_publish(bus, conn, session_id, work)

    threading.Thread(target=run, name=f"turn-{session_id[:8]}").start()
    return event_stream(bus, session_id, after)


def answer_turn(session_id: str, work: TurnWork) -> Response | tuple[Response, int]:
    services: TurnServices = current_app.extensions["turn_services"]
    bus: EventBus = current_app.extensions["events"]
    if wants_event_stream():
        return sse_response(stream_turn(services, bus, session_id, work))
    status, payload = run_and_publish(bus, get_db(), session_id, work)
    return jsonify(payload), status
