"""The ASGI application: Flask on a bounded thread pool, long answers on the event loop.

Every request runs the Flask app on one of `threads` worker threads (`serving.wsgi_bridge`),
exactly as under any WSGI server: auth, validation, JSON errors, all in one place. A view
whose answer outlives it (an event stream, a wait for a turn's end) leaves a `LiveBody` in
the request's hand-off slot (`api.live.live_response`); its placeholder response is held
back, the thread returns to the pool, and the body answers from here, on the event loop. So
an open stream, or a `POST /chat` waiting for its turn, costs a coroutine, not a thread.

`/mcp` goes to the MCP endpoint (`mcp_server/`), an ASGI app of its own: the SDK's transport
reads and answers there, and only the tool calls take a thread. Its task group starts with
the ASGI lifespan and stops at shutdown.

The page and its bundle (`/` and `/static/...`, all text but the images and fonts) go out
gzip-compressed to a client that accepts it, through Starlette's GZipMiddleware (a
dependency of the MCP SDK, pinned). Only those paths: an event stream, `/chat` or `/v1`
never meets a compressor, which would hold back its frames until a block fills. Flask's
static route already answers with an ETag and `Cache-Control: no-cache`, so a reload
revalidates (304) and gets each file only when it changed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, cast

from flask import Flask
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp

from api.live import HANDOFF_KEY, HandoffSlot, Receive, Send
from mcp_server.endpoint import PATH as MCP_PATH
from mcp_server.endpoint import McpEndpoint
from serving.wsgi_bridge import WsgiBridge

BUNDLE_PREFIX = "/static/"
GZIP_LEVEL = 6  # zlib's default: nearly all of level 9's saving on text for a fraction of the CPU
GZIP_MIN_BYTES = 1024  # smaller files gain less than the header costs

HttpApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]


class OrchestratorApp:
    def __init__(self, flask_app: Flask, *, threads: int) -> None:
        self.flask_app = flask_app
        self.wsgi = WsgiBridge(flask_app, threads=threads)
        self.mcp = McpEndpoint(flask_app, threads=threads)
        # Starlette types a scope as a MutableMapping, this module as a dict: the same object.
        gzip = GZipMiddleware(cast("ASGIApp", self.flask), minimum_size=GZIP_MIN_BYTES, compresslevel=GZIP_LEVEL)
        self.bundle = cast("HttpApp", gzip)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send, self.mcp.running())
            return
        if scope["type"] != "http":  # websocket: not served here
            await send({"type": "websocket.close", "code": 1000})
            return
        if scope["path"].rstrip("/") == MCP_PATH:
            await self.mcp(scope, receive, send)
            return
        if scope["path"] == "/" or scope["path"].startswith(BUNDLE_PREFIX):
            await self.bundle(scope, receive, send)
            return
        await self.flask(scope, receive, send)

    async def flask(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        slot = HandoffSlot()
        answer = await self.wsgi.answer({**scope, HANDOFF_KEY: slot}, receive, ready=slot.ready)
        if slot.body is None:
            await self.wsgi.write(answer, send, receive)
        else:  # the placeholder's status and headers (cookies included) go with the body
            await slot.body.respond(answer.start, send, receive)


async def lifespan(receive: Receive, send: Send, *running: AbstractAsyncContextManager[None]) -> None:
    """Start what runs on the event loop (`/mcp`'s task group); `create_app` built the rest."""
    async with AsyncExitStack() as stack:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                for context in running:
                    await stack.enter_async_context(context)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await stack.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return
