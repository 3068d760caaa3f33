"""The ASGI application: Flask on a bounded thread pool, long answers on the event loop.

Every request runs the Flask app on one of `threads` worker threads (via a2wsgi), exactly
as under any WSGI server: auth, validation, JSON errors, all in one place. A view whose
answer outlives it (an event stream, a wait for a turn's end) leaves a `LiveBody` in the
request's hand-off slot (`api.live.live_response`); its placeholder response is held back,
the thread returns to the pool, and the body answers from here, on the event loop. So an
open stream, or a `POST /chat` waiting for its turn, costs a coroutine, not a thread.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from a2wsgi import WSGIMiddleware
from flask import Flask

from api.live import HANDOFF_KEY, ASGIMessage, HandoffSlot, Receive, Send


def outside_flask(receive: Receive) -> Receive:
    """`receive`, run on the loop in an empty context whichever thread asks for it.

    a2wsgi reads a request body from the worker thread with `run_coroutine_threadsafe`,
    which runs `receive()` in a copy of that thread's context: inside Flask's app and request
    contexts. When the body came in several parts, uvicorn's `receive` resumes reading the
    socket there, and the reader it registers keeps that context: every later request on the
    keep-alive connection then started inside the old request's app context (its `g`, its
    SQLite connection from another thread) and failed. Found by the OpenAPI fuzzer
    (`tests/test_openapi_fuzz.py`). A fresh context per call keeps the socket's callbacks
    free of any request's state.
    """

    async def received() -> ASGIMessage:
        return await receive()

    async def receive_outside_flask() -> ASGIMessage:
        return await asyncio.get_running_loop().create_task(received(), context=contextvars.Context())

    return receive_outside_flask


class OrchestratorApp:
    def __init__(self, flask_app: Flask, *, threads: int) -> None:
        self.flask_app = flask_app
        # a2wsgi types its app, scope and messages as its own narrower protocols and TypedDicts; ours are plain dicts
        self.wsgi = WSGIMiddleware(flask_app, workers=threads)  # type: ignore[arg-type]

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.wsgi(scope, receive, send)  # type: ignore[arg-type]  # lifespan, websocket refusal (a2wsgi types, above)
            return
        slot = HandoffSlot()
        start: ASGIMessage | None = None

        async def forward(message: ASGIMessage) -> None:
            nonlocal start
            if slot.body is None:
                await send(message)
            elif message["type"] == "http.response.start":
                start = message  # the placeholder's status and headers (cookies included)

        await self.wsgi({**scope, HANDOFF_KEY: slot}, outside_flask(receive), forward)  # type: ignore[arg-type]  # a2wsgi types
        if slot.body is not None and start is not None:
            await slot.body.respond(start, send, receive)
