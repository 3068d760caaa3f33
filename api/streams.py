"""`GET /sessions/<id>/generate/stream` (progress, with replay) and `GET /sessions/<id>/trace`.

Progress: every event of the session's latest run (a chat turn or a generation job),
replayed for late subscribers, then live, closed after the run's terminal event; a
client reconnecting with `Last-Event-ID` gets what it missed. Trace: the same events as one
continuous feed that never closes on its own, for debugging; it exists only when
`TRACE_ENABLED=1` (404 otherwise, like any unknown route).
"""

from __future__ import annotations

from flask import Blueprint, current_app

from api.auth import require_user
from api.errors import not_found
from api.sessions import owned_session
from api.sse import event_stream, last_event_id, sse_response

bp = Blueprint("streams", __name__)
bp.before_request(require_user)


@bp.get("/sessions/<session_id>/generate/stream")
def progress(session_id: str):  # type: ignore[no-untyped-def]
    owned_session(session_id)
    return sse_response(event_stream(current_app.extensions["events"], session_id, last_event_id()))


@bp.get("/sessions/<session_id>/trace")
def trace(session_id: str):  # type: ignore[no-untyped-def]
    if not current_app.extensions["settings"].trace_enabled:
        raise not_found("route")
    owned_session(session_id)
    bus = current_app.extensions["events"]
    return sse_response(event_stream(bus, session_id, last_event_id(), until_terminal=False))
