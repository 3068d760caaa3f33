"""The two answers of `POST /v1/chat/completions`, written when the turn allows (`api/live.py`).

`CompletionBody` waits for the turn's outcome and answers one `chat.completion` (or the
OpenAI-shaped error with the turn's status: 502 when the provider failed). `ChunkStreamBody`
follows the turn's live events (`live.follow.StreamFollower`, as every SSE stream does)
and writes `chat.completion.chunk` frames as the answer is written. Its status line waits
for the first frame, so a turn that fails before writing anything (the provider is down)
still answers a real 502 with an OpenAI error body rather than a 200 stream; a quiet turn
(a slow tool) gets SSE comment heartbeats once the stream has started, or starts the stream
with one after `heartbeat_s` of silence. Like every stream, it takes one of the user's
stream seats for its lifetime; under the asyncio server it holds no thread while idle.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

from flask import Response, jsonify

from api.live import SSE_HEADERS, ClientWatch, Receive, Send, StreamSeat, _headers, watching_client
from api.refusal import refusal_body, refuse_unless
from api.turns import http_answer, turn_outcome
from api.v1.wire import ChunkTranslator, chat_completion, openai_error
from foundation.events import EventName
from live.bus import Event
from live.follow import FollowPlan, StreamFollower
from live.interfaces import EventLog
from live.turns import TurnLease, TurnOutcome

ASGIMessage = dict[str, Any]
HEARTBEAT = ": keep-alive\n\n"


def json_answer(status: int, payload: dict[str, Any]) -> Response:
    response = jsonify(payload)
    response.status_code = status
    return response


async def send_json(
    start: ASGIMessage, send: Send, status: int, payload: dict[str, Any], extra: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    body = json.dumps(payload, separators=(",", ":")).encode() + b"\n"
    drop = (b"content-length", b"content-type", b"cache-control", b"x-accel-buffering")
    headers = _headers(start, drop) + [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class CompletionBody:
    placeholder_mimetype = "application/json"

    def __init__(self, lease: TurnLease, prompt_chars: int) -> None:
        self.lease = lease
        self.prompt_chars = prompt_chars
        self.created = int(time.time())

    def answer(self, status: int, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if status == 200:
            return 200, chat_completion(payload, self.prompt_chars, self.created)
        return status, openai_error(status, payload)

    def sync_response(self) -> Response:
        return json_answer(*self.answer(*http_answer(self.lease.outcome.result())))

    @property
    def ready(self) -> Future[TurnOutcome]:
        return self.lease.outcome

    async def respond(self, start: ASGIMessage, send: Send, receive: Receive) -> None:
        status, payload = await turn_outcome(self.lease)
        await send_json(start, send, *self.answer(status, payload))


class ChunkStreamBody:
    placeholder_mimetype = "text/event-stream"
    ready = None  # a stream starts at once

    def __init__(self, bus: EventLog, plan: FollowPlan, translator: ChunkTranslator, seat: StreamSeat | None) -> None:
        self.bus = bus
        self.plan = plan
        self.translator = translator
        self.seat = seat

    def translate(self, events: list[Event]) -> str:
        return "".join(self.translator.frames(event) for event in events)

    def frames(self) -> Iterator[str]:
        """The blocking form (WSGI servers, tests): frames, heartbeats after silence."""
        follower = StreamFollower(self.bus, self.plan)
        quiet_since = time.monotonic()
        while True:
            events, finished = follower.step()
            out = self.translate(events)
            if out:
                quiet_since = time.monotonic()
                yield out
            if finished or self.translator.failure is not None:
                return
            left = self.bus.heartbeat_s - (time.monotonic() - quiet_since)
            if left <= 0 or not follower.wait(left):
                if time.monotonic() - quiet_since >= self.bus.heartbeat_s:
                    yield HEARTBEAT
                    quiet_since = time.monotonic()

    def sync_response(self) -> Response:
        frames = self.frames()
        first = next(frames, "")
        if self.translator.failure is not None:
            return json_answer(*self.translator.failure)
        if self.seat is not None:
            refuse_unless(self.seat.take())
        seat = self.seat

        def body() -> Iterator[str]:
            try:
                yield first
                yield from frames
            finally:
                if seat is not None:
                    seat.give_back()

        return Response(body(), mimetype="text/event-stream", headers=SSE_HEADERS)

    async def respond(self, start: ASGIMessage, send: Send, receive: Receive) -> None:
        if self.seat is not None:
            verdict = self.seat.take()
            if not verdict.allowed:
                self.seat.telemetry.rate_limited(verdict.limit)  # a view's refusal counts in `refuse`
                await send_json(
                    start,
                    send,
                    429,
                    openai_error(429, refusal_body(verdict)),
                    ((b"retry-after", str(verdict.retry_after_s).encode()),),
                )
                return
        try:
            await self._stream(start, send, receive)
        finally:
            if self.seat is not None:
                self.seat.give_back()

    async def _stream(self, start: ASGIMessage, send: Send, receive: Receive) -> None:
        async with watching_client(receive) as client:
            await self._follow(start, send, client)

    async def _follow(self, start: ASGIMessage, send: Send, client: ClientWatch) -> None:
        follower = StreamFollower(self.bus, self.plan)
        started = False

        async def write(data: str, more: bool = True) -> None:
            nonlocal started
            if not started:
                started = True
                await send(
                    {
                        "type": "http.response.start",
                        "status": start.get("status", 200),
                        "headers": _headers(start, (b"content-length",)),
                    }
                )
            await send({"type": "http.response.body", "body": data.encode(), "more_body": more})

        quiet_since = time.monotonic()
        while not client.gone:
            events, finished = follower.step()
            if any(event.name == EventName.MESSAGE_STORED for event in events):
                out = await asyncio.to_thread(self.translate, events)  # reads the tool result back
            else:
                out = self.translate(events)
            if self.translator.failure is not None and not started:
                await send_json(start, send, *self.translator.failure)
                return
            if out:
                quiet_since = time.monotonic()
                await write(out)
            if finished or self.translator.failure is not None:
                await write("", more=False)
                return
            left = self.bus.heartbeat_s - (time.monotonic() - quiet_since)
            if left > 0 and await follower.wait_async(left, client.wakeup):
                continue
            if not client.gone and time.monotonic() - quiet_since >= self.bus.heartbeat_s:
                await write(HEARTBEAT)
                quiet_since = time.monotonic()
