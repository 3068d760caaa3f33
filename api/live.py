"""Answers that outlive their request thread: event streams, and waits for a turn's end
(`api/turns.py`'s `TurnOutcomeBody`).

A view returns `live_response(body)`. Under the asyncio server (`serving/asgi.py`) the view
only validates and decides; it drops the body into the request's hand-off slot and returns
a placeholder, its thread goes back to the pool, and the server writes the answer from the
event loop (`respond`): an idle stream then holds no thread (SPEC 7a.6). Under any plain
WSGI server (Flask's test client included) the same body answers from the request's thread
(`sync_response`). Both follow the same rules (`live.follow.StreamFollower`), so they
cannot drift apart.

Each user holds at most `MAX_STREAMS_PER_USER` event streams at once. The seat is taken
where the stream really starts (on the event loop, or in the request thread under WSGI)
and given back where it ends, whether the run finished or the client left; the view only
checks that there is room, so a user already at the limit gets an ordinary 429 answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from flask import Response, g, request, stream_with_context

from api.refusal import refusal_body, refuse_unless
from api.services import services
from live.bus import Event, Wakeup
from live.follow import FollowPlan, StreamFollower
from live.interfaces import EventLog
from live.limits import StreamSeats, Verdict
from observe.telemetry import Telemetry

HANDOFF_KEY = "orchestrator.handoff"  # in the ASGI scope (the WSGI environ's "asgi.scope")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
RETRY_MS = 3000
ASGIMessage = dict[str, Any]
Send = Callable[[ASGIMessage], Awaitable[None]]
Receive = Callable[[], Awaitable[ASGIMessage]]


def frame(event: Event) -> str:
    """One SSE frame. The leading comment line (ignored by clients) carries the publication
    time, so delivery delay can be measured without changing any payload."""
    return f": ts={event.at:.6f}\nid: {event.id}\nevent: {event.name}\ndata: {event.json}\n\n"


def closing(frames: Iterator[str], on_close: Callable[[], object]) -> Iterator[str]:
    """`frames`, then `on_close()` however the stream ends (the WSGI server closes the
    iterator when the client goes, and closing this generator closes `frames` too)."""
    try:
        yield from frames
    finally:
        on_close()


def wants_event_stream() -> bool:
    return "text/event-stream" in request.headers.get("Accept", "")


def last_event_id() -> int | None:
    """`Last-Event-ID` (what EventSource sends on reconnect) or `?last_event_id=`."""
    raw = request.headers.get("Last-Event-ID") or request.args.get("last_event_id")
    if raw is None or raw == "":
        return None
    try:
        return max(0, int(raw))
    except ValueError:
        return None


class LiveBody(Protocol):
    placeholder_mimetype: str

    @property
    def ready(self) -> Future[Any] | None:
        """Done once `respond` can write without waiting (None: it may start at once); the
        server waits for it off the event loop."""

    def sync_response(self) -> Response: ...

    async def respond(self, start: ASGIMessage, send: Send, receive: Receive) -> None: ...


@dataclass
class HandoffSlot:
    """Put in each request's scope by the asyncio server; a view may leave a body in it."""

    body: LiveBody | None = None

    def ready(self) -> Future[Any] | None:
        """What the body needs done before it is written (see `LiveBody.ready`)."""
        return self.body.ready if self.body is not None else None


@dataclass(frozen=True)
class StreamSeat:
    """One user's claim on a stream slot: taken when the stream starts, given back at its end."""

    slots: StreamSeats
    user_id: int
    telemetry: Telemetry  # the open-streams gauge (SPEC 16)

    def take(self) -> Verdict:
        verdict = self.slots.take(self.user_id)
        if verdict.allowed:
            self.telemetry.stream_opened()
        return verdict

    def give_back(self) -> None:
        self.slots.give_back(self.user_id)
        self.telemetry.stream_closed()


def stream_seat() -> StreamSeat | None:
    """The current user's seat for a new stream; 429 now if they already hold the maximum."""
    slots = services().stream_slots
    user = g.get("user")
    if slots is None or user is None:
        return None
    refuse_unless(slots.room(user.id))
    return StreamSeat(slots, user.id, services().telemetry)


def live_response(body: LiveBody) -> Response:
    if isinstance(body, EventStreamBody):
        body.seat = stream_seat()
    scope = request.environ.get("asgi.scope")
    slot = scope.get(HANDOFF_KEY) if isinstance(scope, dict) else None
    if not isinstance(slot, HandoffSlot):
        return body.sync_response()
    slot.body = body
    headers = SSE_HEADERS if body.placeholder_mimetype == "text/event-stream" else {}
    return Response(b"", mimetype=body.placeholder_mimetype, headers=headers)


def _headers(start: ASGIMessage, drop: tuple[bytes, ...]) -> list[tuple[bytes, bytes]]:
    return [(name, value) for name, value in start.get("headers", []) if name.lower() not in drop]


@dataclass
class ClientWatch:
    """`wakeup` fires when the client leaves; `gone` says it has."""

    wakeup: Wakeup
    gone: bool = False


@asynccontextmanager
async def watching_client(receive: Receive) -> AsyncIterator[ClientWatch]:
    """Watch for the client leaving while a body is written from the event loop: reading
    `receive` is the only way an ASGI app learns it, so one task reads it meanwhile."""
    client = ClientWatch(Wakeup(asyncio.get_running_loop()))

    async def listen() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        client.gone = True
        client.wakeup.fire()

    listener = asyncio.create_task(listen())
    try:
        yield client
    finally:
        listener.cancel()


class EventStreamBody:
    """SSE frames of one followed run, with heartbeats after `heartbeat_s` of silence."""

    placeholder_mimetype = "text/event-stream"
    ready = None  # a stream starts at once

    def __init__(self, bus: EventLog, plan: FollowPlan) -> None:
        self.bus = bus
        self.plan = plan
        self.seat: StreamSeat | None = None  # whose stream this is (set by `live_response`)

    def frames(self) -> Iterator[str]:
        """The blocking form, for WSGI servers and tests."""
        follower = StreamFollower(self.bus, self.plan)
        yield f"retry: {RETRY_MS}\n\n"
        quiet_since = time.monotonic()
        while True:
            events, finished = follower.step()
            if events:
                quiet_since = time.monotonic()
                yield "".join(frame(event) for event in events)
            if finished:
                return
            left = self.bus.heartbeat_s - (time.monotonic() - quiet_since)
            if left <= 0 or not follower.wait(left):
                if time.monotonic() - quiet_since >= self.bus.heartbeat_s:
                    yield frame(follower.heartbeat())  # or the stream's end: Redis did not answer
                    quiet_since = time.monotonic()

    def sync_response(self) -> Response:
        frames: Iterator[str] = stream_with_context(self.frames())
        if self.seat is not None:
            refuse_unless(self.seat.take())
            frames = closing(frames, self.seat.give_back)  # the WSGI server closes it at the end
        return Response(frames, mimetype="text/event-stream", headers=SSE_HEADERS)

    async def respond(self, start: ASGIMessage, send: Send, receive: Receive) -> None:
        if self.seat is None:
            await self._stream(start, send, receive)
            return
        verdict = self.seat.take()
        if not verdict.allowed:  # others of this user's streams started since the view checked
            self.seat.telemetry.rate_limited(verdict.limit)  # a view's refusal counts in `refuse`
            await _refuse(start, send, verdict)
            return
        try:
            await self._stream(start, send, receive)
        finally:
            self.seat.give_back()

    async def _stream(self, start: ASGIMessage, send: Send, receive: Receive) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": start.get("status", 200),
                "headers": _headers(start, (b"content-length",)),
            }
        )
        async with watching_client(receive) as client:
            await self._follow(send, client)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _follow(self, send: Send, client: ClientWatch) -> None:
        follower = StreamFollower(self.bus, self.plan)
        await send({"type": "http.response.body", "body": f"retry: {RETRY_MS}\n\n".encode(), "more_body": True})
        quiet_since = time.monotonic()
        while not client.gone:
            events, finished = follower.step()
            if events:
                quiet_since = time.monotonic()
                data = "".join(frame(event) for event in events).encode()
                await send({"type": "http.response.body", "body": data, "more_body": True})
            if finished:
                return
            left = self.bus.heartbeat_s - (time.monotonic() - quiet_since)
            if left > 0 and await follower.wait_async(left, client.wakeup):
                continue
            if not client.gone and time.monotonic() - quiet_since >= self.bus.heartbeat_s:
                data = frame(follower.heartbeat()).encode()  # or the stream's end: Redis did not answer
                await send({"type": "http.response.body", "body": data, "more_body": True})
                quiet_since = time.monotonic()


async def _refuse(start: ASGIMessage, send: Send, verdict: Verdict) -> None:
    body = json.dumps(refusal_body(verdict)).encode()
    headers = _headers(start, (b"content-length", b"content-type", b"cache-control", b"x-accel-buffering")) + [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(verdict.retry_after_s).encode()),
    ]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
