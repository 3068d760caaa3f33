"""A streamable-HTTP MCP server for the MCP client tests, written with the SDK's server side
(`MCPServer`) and served by uvicorn on a loopback port, in a thread of the test process.

Its tools behave well or badly on purpose: `echo`; `slow` (reports progress, notes when it is
cancelled); `hang` (never answers); `flood` (answers 20 MB); `picture` (an image and text);
`broken` (an error result); `grow` (adds the tool `late` and says its list changed). A wrapper
in front of it answers any call of the tool `garbage` with a body that is not JSON-RPC.
`stop()` and `start()` kill and revive the server on the same port (a server that dies).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Self

import anyio
import mcp_types as types
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from PIL import Image as PILImage

from testing.hostile import free_port
from testing.waiting import wait_until

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
FLOOD_BYTES = 20 * 1024 * 1024


def png_bytes() -> bytes:
    buffer = io.BytesIO()
    PILImage.new("RGB", (8, 6), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


@dataclass
class Observed:
    """What the server saw, for the tests' assertions."""

    cancelled: list[str] = field(default_factory=list)  # tools whose call was cancelled
    methods: list[str] = field(default_factory=list)  # JSON-RPC methods posted to the server, in order
    post_ports: list[int] = field(default_factory=list)  # the client's port of each POST (its connection)
    started: list[str] = field(default_factory=list)


def build_server(observed: Observed) -> MCPServer:
    server = MCPServer("faults")

    @server.tool(description="Repeat the text.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Work for a while, reporting progress.")
    async def slow(steps: int, ctx: Context) -> str:
        observed.started.append("slow")
        try:
            for step in range(steps):
                await ctx.report_progress(step, steps, f"step {step}")
                await anyio.sleep(0.1)
        except anyio.get_cancelled_exc_class():
            observed.cancelled.append("slow")
            raise
        return "done"

    @server.tool(description="Never answer.")
    async def hang(reason: str) -> str:
        observed.started.append("hang")
        await anyio.sleep(3600)
        return "never"

    @server.tool(description="Answer far too much.")
    def flood(reason: str) -> str:
        return "x" * FLOOD_BYTES

    @server.tool(description="Draw a picture.")
    def picture(subject: str) -> types.CallToolResult:
        image = types.ImageContent(data=base64.b64encode(png_bytes()).decode(), mime_type="image/png")
        return types.CallToolResult(content=[types.TextContent(text=f"a picture of {subject}"), image])

    @server.tool(description="Fail as a tool.")
    def broken(reason: str) -> str:
        raise ToolError(f"broken on purpose: {reason}")

    @server.tool(description="Add a tool.")
    async def grow(name: str, ctx: Context) -> str:
        @server.tool(name=name, description="A tool added at run time.")
        def late(word: str) -> str:
            return f"late: {word}"

        await ctx.session.send_tool_list_changed()  # 2025-11-25: a notification on the session
        await ctx.notify_tools_changed()  # 2026-07-28: an event on the listen streams
        return "grown"

    @server.tool(description="Answer garbage (the wrapper answers instead).")
    def garbage(reason: str) -> str:
        return "not reached"

    return server


def garbage_wrapper(inner: Callable[[Scope, Receive, Send], Awaitable[None]], observed: Observed) -> Any:
    """Answers a `tools/call` of `garbage` with a truncated JSON body; passes the rest on (and
    notes each JSON-RPC method posted)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await inner(scope, receive, send)
            return
        observed.post_ports.append(int((scope.get("client") or ("", 0))[1]))
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = {}
        if isinstance(parsed, dict):
            observed.methods.append(str(parsed.get("method")))
        if isinstance(parsed, dict) and (parsed.get("params") or {}).get("name") == "garbage":
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": b'{"jsonrpc": "2.0", "id": ' + b"[1, 2"})
            return
        replayed = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await inner(scope, replay, send)

    return app


class ThreadedAsgiServer:
    """An ASGI app (`_app`, made anew at each start) served by uvicorn in a thread on `url`;
    `stop()` and `start()` again on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def _app(self) -> Any:
        raise NotImplementedError

    def start(self) -> None:
        config = uvicorn.Config(self._app(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        config.timeout_graceful_shutdown = 0
        self._server = uvicorn.Server(config)
        server = self._server
        self._thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
        self._thread.start()
        wait_until(lambda: server.started, f"the {type(self).__name__} starts")

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._server.force_exit = True
            self._thread.join(timeout=10)
            self._server = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class HttpMcpServer(ThreadedAsgiServer):
    """The test MCP server on `url`, in a thread; `stop()` and `start()` again on the same port."""

    def __init__(self, json_response: bool = False) -> None:
        super().__init__()
        self.json_response = json_response  # answer each POST with one JSON body instead of a stream of events
        self.observed = Observed()

    def _app(self) -> Any:
        mcp = build_server(self.observed)
        return garbage_wrapper(mcp.streamable_http_app(json_response=self.json_response), self.observed)
