"""Server-sent events over the per-session bus (SPEC section 7).

`event_stream` turns bus events into SSE frames: `id:` (monotonic per session),
`event:` (the name), `data:` (JSON). When nothing happens for the heartbeat interval a
`heartbeat` frame keeps proxies and browsers from closing the connection. The stream ends
after a terminal event.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from flask import Response, request, stream_with_context

from events.bus import Event, EventBus

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Connection": "keep-alive"}
RETRY_MS = 3000


def frame(event: Event) -> str:
    """One SSE frame. The leading comment line (ignored by clients) carries the publication
    time, so delivery delay can be measured without changing any payload."""
    data = json.dumps(event.data, ensure_ascii=False)
    return f": ts={event.at:.6f}\nid: {event.id}\nevent: {event.name}\ndata: {data}\n\n"


def last_event_id() -> int | None:
    """`Last-Event-ID` (what EventSource sends on reconnect) or `?last_event_id=`."""
    raw = request.headers.get("Last-Event-ID") or request.args.get("last_event_id")
    if raw is None or raw == "":
        return None
    try:
        return max(0, int(raw))
    except ValueError:
        return None


def event_stream(bus: EventBus, session_id: str, after: int | None, *, until_terminal: bool = True) -> Iterator[str]:
    yield f"retry: {RETRY_MS}\n\n"
    for event in bus.subscribe(session_id, after, until_terminal=until_terminal):
        yield frame(bus.heartbeat(session_id) if event is None else event)


def sse_response(frames: Iterator[str]) -> Response:
    return Response(stream_with_context(frames), mimetype="text/event-stream", headers=SSE_HEADERS)


def wants_event_stream() -> bool:
    return "text/event-stream" in request.headers.get("Accept", "")
