"""`GET /sessions/<id>/generate/stream` (progress, with replay) and `GET /sessions/<id>/trace`.

Progress follows one run of the session (SPEC 7): the active turn or job, or with
`?turn_id=` that one, and carries only that run's events (a lost turn's end is published
as the next turn claims, so a log may hold two runs' events; a follower sees its own only).
It starts at the run's first event (or after the client's `Last-Event-ID`, replaying what it
missed, with `replay.gap` where some is gone) and ends with the run's `done` or `error`.
With no active run it replays the latest run's end and closes. Closing the stream never stops the run. Trace: every event of the session as one
feed that never closes on its own, only when `TRACE_ENABLED=1` (404 otherwise, like any
unknown route).
"""

from __future__ import annotations

from flask import Blueprint, request
from flask.typing import ResponseReturnValue

from api.auth import require_user
from api.declare import EVENT_STREAM, LAST_EVENT_ID, NOT_FOUND, Param, Reply, operation
from api.errors import not_found
from api.live import EventStreamBody, last_event_id, live_response
from api.services import services
from api.sessions import owned_session
from live import Live
from live.follow import FollowPlan

bp = Blueprint("streams", __name__)
bp.before_request(require_user)


def follow_plan(live: Live, session_id: str, turn_id: str | None, after: int | None) -> FollowPlan:
    """Which run a progress stream follows, and from where."""
    from_client = after is not None
    active = live.turns.active(session_id)
    if active is not None and turn_id in (None, active.turn_id):
        start = active.start_cursor if after is None else after
        return FollowPlan(session_id, start, active.turn_id, only_turn=True, from_client=from_client)
    end = live.bus.last_terminal(session_id)
    if end is not None and turn_id in (None, end.turn_id):
        if after is None or after < end.id:
            start = end.id - 1 if after is None else after
            return FollowPlan(session_id, start, end.turn_id, only_turn=turn_id is not None, from_client=from_client)
    elif turn_id is not None:
        raise not_found("turn")
    return FollowPlan(
        session_id, live.bus.position() if after is None else after, turn_id, from_client=from_client, replay_only=True
    )


@bp.get("/sessions/<session_id>/generate/stream")
@operation(
    "Follow the session's running turn (or its last one) as SSE, with replay",
    tag="sessions",
    params=(Param("turn_id", "query", {"type": "string"}, "follow this turn"), *LAST_EVENT_ID),
    replies={200: EVENT_STREAM, 404: NOT_FOUND},
)
def progress(session_id: str) -> ResponseReturnValue:
    owned_session(session_id)
    live = services().live
    turn_id = request.args.get("turn_id") or None
    plan = follow_plan(live, session_id, turn_id, last_event_id())
    return live_response(EventStreamBody(live.bus, plan))


@bp.get("/sessions/<session_id>/trace")
@operation(
    "Every event of a session, never closing (only when TRACE_ENABLED=1, else 404)",
    tag="sessions",
    params=LAST_EVENT_ID,
    replies={200: EVENT_STREAM, 404: Reply("no such session, or tracing is off")},
)
def trace(session_id: str) -> ResponseReturnValue:
    if not services().settings.trace_enabled:
        raise not_found("route")
    owned_session(session_id)
    live = services().live
    after = last_event_id()
    plan = FollowPlan(
        session_id,
        live.bus.position() if after is None else after,
        None,
        from_client=after is not None,
        until_terminal=False,
    )
    return live_response(EventStreamBody(live.bus, plan))
