"""A streamable-HTTP MCP server that injects faults on demand, for tests/mcp_client/test_mcp_http_faults.py.

The SDK's `MCPServer` in a thread (uvicorn, loopback), behind the 2025-11-25 gate of
tests/fixtures/mcp_one_era.py (sessions exist only in that era), behind a wrapper that:

- `expire()`: forgets every session id it has seen, and answers a request carrying one with
  404 and the SDK's own "Session not found" body, as the SDK does for a session it ended;
- the tool `late`: answers its first 64 KiB at once, then, after `LATE_AFTER_S`, the rest of
  a 64 MiB answer in 64 KiB chunks, made as they go (the server holds none of it), until the
  client goes away; `observed.late_sent` counts the bytes written, `late_gone` the clients
  that left before the end.

`stop()` and `start()` kill and revive it on the same port.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

from tests.fixtures.mcp_one_era import LEGACY, http_gate
from tests.mcp_http_support import ThreadedAsgiServer

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
CHUNK = 64 * 1024
LATE_TOTAL = 64 * 1024 * 1024
LATE_AFTER_S = 3.0


@dataclass
class FaultsSeen:
    calls: list[str] = field(default_factory=list)  # tools called, in order (the late one included)
    methods: list[str] = field(default_factory=list)  # JSON-RPC methods posted (not those refused 404)
    initializes: int = 0
    expired_hits: int = 0  # requests answered 404 for an expired session
    late_sent: int = 0
    late_gone: int = 0


def build_server() -> MCPServer:
    server = MCPServer("faults-http")

    @server.tool(description="Repeat the text.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Answer too late (the wrapper answers instead).")
    def late(reason: str) -> str:
        return "not reached"

    return server


async def _read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


class FaultWrapper:
    def __init__(self, inner: Callable[[Scope, Receive, Send], Awaitable[None]], seen: FaultsSeen) -> None:
        self.inner, self.seen = inner, seen
        self.sessions: set[str] = set()
        self.expired: set[str] = set()

    def expire(self) -> None:
        self.expired |= self.sessions
        self.sessions.clear()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        session = headers.get("mcp-session-id")
        if session in self.expired:
            self.seen.expired_hits += 1
            body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}}
            await send(
                {"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": json.dumps(body).encode()})
            return
        if scope["method"] != "POST":
            await self.inner(scope, receive, self._noting(send))
            return
        body = await _read_body(receive)
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = {}
        parsed = parsed if isinstance(parsed, dict) else {}
        self.seen.methods.append(str(parsed.get("method")))
        if parsed.get("method") == "initialize":
            self.seen.initializes += 1
        if parsed.get("method") == "tools/call":
            name = str((parsed.get("params") or {}).get("name"))
            self.seen.calls.append(name)
            if name == "late":
                await self._late(parsed.get("id"), receive, send)
                return
        replayed = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.inner(scope, replay, self._noting(send))

    def _noting(self, send: Send) -> Send:
        """`send`, noting the session id each new session is given."""

        async def noted(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                for key, value in message.get("headers", []):
                    if key.decode("latin-1").lower() == "mcp-session-id":
                        self.sessions.add(value.decode("latin-1"))
            await send(message)

        return noted

    async def _late(self, request_id: Any, receive: Receive, send: Send) -> None:
        gone = anyio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        head = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": ""}]}})
        opening = head[: head.index('"text": "') + len('"text": "')].encode()
        chunk = b"x" * CHUNK
        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": opening + chunk, "more_body": True})
            self.seen.late_sent += len(opening) + CHUNK
            with anyio.move_on_after(LATE_AFTER_S):
                await gone.wait()
            while not gone.is_set() and self.seen.late_sent < LATE_TOTAL:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                self.seen.late_sent += CHUNK
                await anyio.sleep(0)
            if gone.is_set():
                self.seen.late_gone += 1
            else:
                await send({"type": "http.response.body", "body": b'"}]}}', "more_body": False})
            group.cancel_scope.cancel()


class FaultServer(ThreadedAsgiServer):
    """The old-era server behind a `FaultWrapper`, in a thread; `stop()` and `start()` again on the same port."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = FaultsSeen()
        self.wrapper: FaultWrapper | None = None

    def expire(self) -> None:
        assert self.wrapper is not None
        self.wrapper.expire()

    def _app(self) -> Any:
        self.wrapper = FaultWrapper(http_gate(LEGACY, build_server().streamable_http_app()), self.seen)
        return self.wrapper
