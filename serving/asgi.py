"""The ASGI application: Flask on a bounded thread pool, long answers on the event loop.

Every request runs the Flask app on one of `threads` worker threads (`serving.wsgi_bridge`),
exactly as under any WSGI server: auth, validation, JSON errors, all in one place. A view
whose answer outlives it (an event stream, a wait for a turn's end) leaves a `LiveBody` in
the request's hand-off slot (`api.live.live_response`); its placeholder response is held
back, the thread returns to the pool, and the body answers from here, on the event loop. So
an open stream, or a `POST /chat` waiting for its turn, costs a coroutine, not a thread.
"""

from __future__ import annotations

from typing import Any

from flask import Flask

from api.live import HANDOFF_KEY, HandoffSlot, Receive, Send
from serving.wsgi_bridge import WsgiBridge


class OrchestratorApp:
    def __init__(self, flask_app: Flask, *, threads: int) -> None:
        self.flask_app = flask_app
        self.wsgi = WsgiBridge(flask_app, threads=threads)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":  # websocket: not served here
            await send({"type": "websocket.close", "code": 1000})
            return
        slot = HandoffSlot()
        answer = await self.wsgi.answer({**scope, HANDOFF_KEY: slot}, receive, ready=slot.ready)
        if slot.body is None:
            await self.wsgi.write(answer, send, receive)
        else:  # the placeholder's status and headers (cookies included) go with the body
            await slot.body.respond(answer.start, send, receive)


async def lifespan(receive: Receive, send: Send) -> None:
    """Nothing to start or stop: `create_app` built every service already."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
