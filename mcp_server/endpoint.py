"""`/mcp`: the ASGI endpoint in front of the SDK's streamable-HTTP session manager.

Before the SDK sees a request, this endpoint answers what the rest of the API answers:

- a `Host` we do not serve, or an `Origin` that is present and not allowed: 403
  `host_not_allowed` / `origin_not_allowed`, before anything else (DNS-rebinding protection,
  `mcp_server/origins.py`).
- no bearer token, or one that is nobody's: 401 `unauthorized` with `WWW-Authenticate: Bearer`
  (RFC 6750, which MCP's authorization spec builds on; `error="invalid_token"` when a token
  was sent). The user is put in the request's scope, where the tool handlers read it; a
  host never names a user, so it cannot reach another user's data.
- a POST that is not `application/json`: 415 `unsupported_media_type`.
- a body over `MAX_BODY_BYTES`: 413 `payload_too_large`, read no further. A body nested
  deeper, or holding more values, than `api/bounded_json.py` allows, not UTF-8, or not
  JSON: 400 with a JSON-RPC parse error (-32700), before any parser recurses into it.

The SDK runs stateless (no session to remember between requests, so any server process of
a cluster answers any request) and answers JSON, not an event stream: our tools send no
progress. A GET, which would open a stream for messages the server never sends (held open
until the client gives up), answers 405 as the transport spec allows. Its task group lives as long as the app (`running`, entered by the ASGI
lifespan); before that, or after, `/mcp` answers 503 `mcp_unavailable`. `logging/setLevel` is
accepted (a host may set a level; `/mcp` logs nothing to hosts, so any level holds).
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cached_property
from typing import Any

import anyio
import mcp_types as types
from flask import Flask
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from api.auth import USER_KEY
from api.bodies import MAX_BODY_BYTES
from api.bounded_json import Rejected, decode
from api.errors import dependency_refusal
from api.live import ASGIMessage, Receive, Send
from api.openapi.document import EXTRA_PATHS_KEY
from api.services import services_of
from foundation.fair_share import Busy
from foundation.version import VERSION
from mcp_server.calls import FairThreads, call, user_of
from mcp_server.listing import error_result, is_served, listed, served
from mcp_server.openapi import path_item
from mcp_server.origins import OriginCheck
from mcp_server.read_handlers import ReadHandlers
from storage.users import User
from tools.base import ErrorCode

PATH = "/mcp"
REALM = 'Bearer realm="mcp"'
SERVER_NAME = "orchestrator"


class McpEndpoint:
    """The `/mcp` ASGI app for one Flask app's tools and users."""

    def __init__(self, flask_app: Flask, *, threads: int) -> None:
        self.flask_app = flask_app
        self.threads = threads
        reads = ReadHandlers(flask_app, lambda: self.pool)  # resources, prompts, completions
        with warnings.catch_warnings():  # logging is deprecated from 2026-07-28 on; 2025-11-25 hosts still set it
            warnings.filterwarnings("ignore", "The logging capability is deprecated", MCPDeprecationWarning)
            self.server: Server[Any] = Server(
                SERVER_NAME,
                version=VERSION,
                on_list_tools=self.list_tools,
                on_call_tool=self.call_tool,
                on_set_logging_level=set_logging_level,
                on_list_resources=reads.list_resources,
                on_list_resource_templates=reads.list_resource_templates,
                on_read_resource=reads.read_resource,
                on_list_prompts=reads.list_prompts,
                on_get_prompt=reads.get_prompt,
                on_completion=reads.complete,
            )
        self.manager: StreamableHTTPSessionManager | None = None
        self.pool: FairThreads | None = None
        flask_app.extensions.setdefault(EXTRA_PATHS_KEY, {})[PATH] = path_item()  # in /openapi.json

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The SDK's task group and the call threads, for the app's lifetime (a manager runs once)."""
        logging.getLogger("mcp.server.streamable_http").setLevel(logging.WARNING)  # a line per request otherwise
        manager = StreamableHTTPSessionManager(
            self.server, stateless=True, json_response=True, max_request_body_size=MAX_BODY_BYTES
        )
        async with manager.run():
            self.manager, self.pool = manager, FairThreads(self.threads)
            try:
                yield
            finally:
                self.manager = self.pool = None

    @cached_property
    def origins(self) -> OriginCheck:
        """The allowed `Origin`s and `Host`s, from the app's settings (read on the first request:
        an ASGI front may wrap an app before its services are installed)."""
        return OriginCheck.of(services_of(self.flask_app).settings)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", ()))
        forbidden = self.origins.refusal(header_text(headers.get(b"host")), header_text(headers.get(b"origin")))
        if forbidden is not None:  # before the token is looked up: a rebinding page learns nothing
            await answer(send, 403, error_body(forbidden.code, forbidden.message))
            return
        manager = self.manager
        if manager is None:
            await answer(send, 503, error_body("mcp_unavailable", "the MCP endpoint is not running"))
            return
        try:
            user = await self.authenticate(scope)
        except Exception as error:  # the database did not answer who the token is
            refusal = dependency_refusal(error)
            if refusal is None:
                raise
            await answer(send, refusal.status_code, refusal.to_dict())
            return
        if user is None:
            challenge = REALM if bearer_token(scope) is None else f'{REALM}, error="invalid_token"'
            body = error_body("unauthorized", "missing or invalid bearer token")
            await answer(send, 401, body, ((b"www-authenticate", challenge.encode()),))
            return
        if scope["method"] == "GET":  # no server-initiated messages: no stream to hold open (MCP allows 405)
            body = error_body("method_not_allowed", "/mcp sends no server-initiated messages; POST JSON-RPC requests")
            await answer(send, 405, body, ((b"allow", b"POST"),))
            return
        if scope["method"] == "POST" and not is_json(scope):
            message = "/mcp takes JSON-RPC messages as application/json"
            await answer(send, 415, error_body("unsupported_media_type", message))
            return
        if scope["method"] == "POST":
            received = await read_body(scope, receive, send)
            if received is None:
                return
            receive = replay(received, receive)
        await manager.handle_request({**scope, USER_KEY: user}, receive, send)  # type: ignore[arg-type]

    async def authenticate(self, scope: dict[str, Any]) -> User | None:
        token = bearer_token(scope)
        if token is None:
            return None
        return await anyio.to_thread.run_sync(user_of, self.flask_app, token)

    async def list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        registry = services_of(self.flask_app).turns.registry
        return types.ListToolsResult(tools=[listed(tool) for tool in served(registry)])

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        user: User = ctx.request.scope[USER_KEY]
        tool = services_of(self.flask_app).turns.registry.get(params.name)
        if tool is None or not is_served(tool):
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}; tools/list lists them")
        arguments = dict(params.arguments or {})
        assert self.pool is not None, "calls arrive only while the endpoint runs"
        try:
            return await self.pool.run(user.id, lambda: call(self.flask_app, tool, arguments, user.id))
        except Busy as busy:
            return error_result(ErrorCode.BUSY, busy.message)


async def set_logging_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
    """`logging/setLevel`, accepted: we declare the `logging` capability so that hosts (and the
    conformance suite's `logging-set-level`) may set a level, and since `/mcp` sends no log
    notifications at all, every level is already honoured; there is nothing to store."""
    return types.EmptyResult()


def bearer_token(scope: dict[str, Any]) -> str | None:
    """The token of `Authorization: Bearer <token>` (as `api.auth.bearer_token` reads it)."""
    header = bytes(dict(scope.get("headers", ())).get(b"authorization", b"")).decode("latin1")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def header_text(value: bytes | None) -> str | None:
    return None if value is None else bytes(value).decode("latin1")


def is_json(scope: dict[str, Any]) -> bool:
    content_type = bytes(dict(scope.get("headers", ())).get(b"content-type", b""))
    return content_type.split(b";")[0].strip().lower() == b"application/json"


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def parse_error(message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": types.PARSE_ERROR, "message": message}}


async def answer(send: Send, status: int, body: dict[str, Any], headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    data = json.dumps(body).encode()
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": data, "more_body": False})


async def read_body(scope: dict[str, Any], receive: Receive, send: Send) -> bytes | None:
    """The whole body, or None once a refusal was sent (too large, or not acceptable JSON)."""
    too_large = error_body("payload_too_large", f"/mcp takes bodies of at most {MAX_BODY_BYTES // 1024 // 1024} MiB")
    declared = dict(scope.get("headers", ())).get(b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        await answer(send, 413, too_large)
        return None
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None  # the client went away
        body += message.get("body", b"")
        if len(body) > MAX_BODY_BYTES:
            await answer(send, 413, too_large)
            return None
        if not message.get("more_body", False):
            break
    checked = decode(bytes(body))
    if isinstance(checked, Rejected):
        await answer(send, 400, parse_error(checked.message))
        return None
    return bytes(body)


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the body read already, then waits on the client as before."""
    pending: list[ASGIMessage] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> ASGIMessage:
        if pending:
            return pending.pop()
        return await receive()

    return replayed
