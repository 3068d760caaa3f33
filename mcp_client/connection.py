"""One MCP server, supervised: connect, list its tools, stay connected, reconnect with back-off.

A connection lives on the hub's event loop (`hub.py`) as one task, `run`, until the app
closes. Each round opens the transport (a stdio child, or a streamable-HTTP session), agrees
on a protocol revision, lists the tools (they join the registry through `on_tools`), then waits
until the transport ends: the child exited, or the HTTP session failed. Then it waits a
back-off (doubled after each quick failure, from `MIN_BACKOFF_S` to `MAX_BACKOFF_S`, back to
the start after a round that stayed up `STABLE_S`) and starts again. So a crashing child is
restarted, but never in a tight loop. A call that arrives meanwhile waits for a try that is
due within `outage.WAIT_FOR_TRY_S`, makes one try sooner when the last one failed a while
ago, and otherwise fails at once, "unavailable (reconnecting in N s)" (`outage.py`). A
session the server expired (HTTP 404 to our session id, `http.py`) ends its round and the
next begins without a back-off (`renew`), once: a new session that expires at once too
waits the back-off.

Both protocol eras (SPEC 14): the SDK's `Client(mode="auto")` sends `server/discover`
(revision 2026-07-28, stateless) and falls back to the `initialize` handshake (2025-11-25)
for a server that only speaks the older one; which one was agreed is `protocol`, shown by
the hub's `status()`. The negotiation is the SDK's own (its denylist of what counts as an
old server), not ours.

A stdio child's stderr goes to the log, line by line, cut to `MAX_STDERR_LINE` characters and
at most `STDERR_LINES_PER_MINUTE` lines a minute (the rest are counted and the count logged),
so a noisy server cannot fill the disk. The SDK's `stdio_client` starts the child in its own
process group and, on exit, closes its stdin, then terminates and kills the group: closing
the hub leaves no child behind.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.message import SessionMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_client.config import HttpServer, ServerConfig, StdioServer
from mcp_client.http import HttpObserver, http_client, vetted_addresses
from mcp_client.outage import Outage, Unavailable

log = logging.getLogger("mcp")

MIN_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
STABLE_S = 60.0
RENEW_AFTER_S = 1.0  # a renewed session that expires sooner than this waits the back-off
HANDSHAKE_TIMEOUT_S = 20.0  # discover or initialize, + tools/list (a child's interpreter starting on a busy machine)
MAX_LIST_PAGES = 10
LISTEN_REOPEN_S = 5.0  # a modern server's change-notice stream is opened again at most this often
MAX_STDERR_LINE = 500
STDERR_LINES_PER_MINUTE = 60
CLIENT_INFO = types.Implementation(name="chat-orchestrator", version="1")

ToolsListener = Callable[["ServerConnection", list[types.Tool]], None]


@dataclass
class _Round:
    """One round's own state: its session once made, whether the server expired it."""

    number: int
    end: asyncio.Event = field(default_factory=asyncio.Event)  # set: leave the round (an expired session)
    session: ClientSession | None = None
    expired: bool = False
    started: float = field(default_factory=time.monotonic)


class ServerConnection:
    """The supervised connection to one server; `session` while connected (loop thread only)."""

    def __init__(self, key: str, config: ServerConfig, on_tools: ToolsListener) -> None:
        self.key = key
        self.config = config
        self._on_tools = on_tools
        self.session: ClientSession | None = None
        self.starts = 0  # rounds begun (1 + restarts)
        self.last_error: str | None = None  # why the last round ended or failed, for the log and tests
        self.protocol: str | None = None  # the revision the last handshake agreed ("2026-07-28", "2025-11-25")
        self.outage: Outage | None = None  # while known down: the back-off under way
        self.prompted_tries = 0  # back-offs a call cut short
        self.refused_calls = 0  # calls failed at once while known down
        self.renewals = 0  # sessions the server expired, made again at once
        self.late_answers = 0  # answers dropped unread because they came after the call's deadline
        self._round: _Round | None = None
        self._relist: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None  # made on the loop (`run`)
        self._changed: asyncio.Event | None = None

    async def wait_session(self, timeout_s: float) -> ClientSession:
        """The session, waiting up to `timeout_s` for the try under way, or making one try
        sooner than the back-off would (`outage.py`); `Unavailable` while known down."""
        deadline = anyio.current_time() + timeout_s
        prompted = False
        for _ in range(3):  # at most: the try under way, then the one try this call prompts
            if self.session is not None:
                return self.session
            outage, now = self.outage, time.monotonic()
            if outage is not None and outage.due_soon(now, deadline - anyio.current_time()) and not prompted:
                prompted = True  # the scheduled try is this call's one try
            elif outage is not None:
                if prompted or not outage.may_prompt(now):
                    self.refused_calls += 1
                    raise Unavailable(self.key, outage.retry_in(now), self.last_error)
                prompted = True
                self.outage = None  # a try is under way: the calls behind this one wait for it
                self.prompted_tries += 1
                assert self._wake is not None
                self._wake.set()
            await self._next_change(deadline)
        self.refused_calls += 1
        raise Unavailable(self.key, self.outage.retry_in(time.monotonic()) if self.outage else 0.0, self.last_error)

    def expired(self, session: ClientSession) -> bool:
        """Whether the server said (HTTP 404 to our session id) that `session` is gone."""
        current = self._round
        return current is not None and current.session is session and current.expired

    async def renew(self, old: ClientSession, timeout_s: float) -> ClientSession:
        """A session in place of `old`, which the server expired: its round ends and the next
        one starts at once (`run`); waits up to `timeout_s` for it."""
        current = self._round
        if current is not None and current.session is old:
            current.end.set()
        deadline = anyio.current_time() + timeout_s
        for _ in range(3):  # the old round ending, then the new one's handshake
            if self.session is not None and self.session is not old:
                return self.session
            if self.outage is not None:
                self.refused_calls += 1
                raise Unavailable(self.key, self.outage.retry_in(time.monotonic()), self.last_error)
            await self._next_change(deadline)
        raise TimeoutError("no new session in time")

    async def _next_change(self, deadline: float) -> None:
        """Until the session is made or a try fails (`TimeoutError` past `deadline`)."""
        assert self._changed is not None, "the connection runs on the hub's loop"
        changed = self._changed
        with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
            await changed.wait()

    def _announce(self) -> None:
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()

    def _note_expired(self, number: int) -> None:
        """The HTTP client saw a 404 to our session id (the transport spec's "session not found")."""
        current = self._round
        if current is not None and current.number == number and not current.expired:
            current.expired = True
            current.end.set()
            log.warning("MCP server %s: it expired our session; making a new one", self.key)

    async def run(self) -> None:
        """Connect, serve, reconnect, until cancelled (the hub closing)."""
        self._relist, self._wake, self._changed = asyncio.Event(), asyncio.Event(), asyncio.Event()
        backoff, renewed = MIN_BACKOFF_S, False
        while True:
            self.starts += 1
            current = self._round = _Round(self.starts)
            try:
                await self._one_round()
                self.last_error = (
                    "the server expired our session" if current.expired else "the server closed the connection"
                )
            except Exception as error:  # a round's failure of any kind: logged, then the back-off
                self.last_error = describe(error)
            finally:
                self.session = None
            lasted = time.monotonic() - current.started
            # made again at once, but not in a loop: a new session that expires at once too backs off
            if current.expired and (lasted >= RENEW_AFTER_S or not renewed):
                self.renewals += 1
                renewed = True
                self._announce()
                continue
            renewed = False
            if lasted >= STABLE_S:
                backoff = MIN_BACKOFF_S
            log.warning("MCP server %s: %s; reconnecting in %.1f s", self.key, self.last_error, backoff)
            now = time.monotonic()
            self.outage = Outage(failed_at=now, retry_at=now + backoff)
            self._announce()
            self._wake.clear()
            with anyio.move_on_after(backoff):  # or until a call cuts it short (`wait_session`)
                await self._wake.wait()
            self.outage = None
            backoff = min(MAX_BACKOFF_S, backoff * 2)

    async def _one_round(self) -> None:
        # one scope for the handshake: entered around the whole round (the session's task
        # group opens inside it), its deadline lifted once the tools are listed
        with anyio.CancelScope(deadline=anyio.current_time() + HANDSHAKE_TIMEOUT_S) as handshake:
            await self._serve(handshake)
        if handshake.cancelled_caught:
            raise TimeoutError(f"no handshake and tool listing within {HANDSHAKE_TIMEOUT_S:.0f} s")

    async def _serve(self, handshake: anyio.CancelScope) -> None:
        async with AsyncExitStack() as stack:
            read, write = await self._open(stack)
            ended = anyio.Event()
            relay_send, relay_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            group = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(group.cancel_scope.cancel)  # after the session closed (LIFO)
            group.start_soon(_relay, read, relay_send, ended)
            client = Client(
                _streams(relay_receive, write),
                mode="auto",  # server/discover first, initialize for a server of the older era
                message_handler=self._on_message,
                client_info=CLIENT_INFO,
                cache=None,  # tools/list is ours to repeat when the server says it changed
            )
            await stack.enter_async_context(client)
            session = client.session
            assert self._round is not None
            current = self._round
            current.session = session
            listed = await list_tools(session)
            self._on_tools(self, listed)
            if _announces_changes(session):  # 2026-07-28: change notices come on a listen stream only
                listeners = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(listeners.cancel_scope.cancel)
                listeners.start_soon(self._listen_for_changes, client)
            handshake.deadline = math.inf
            self.protocol = session.protocol_version
            self.session = session
            self._announce()
            assert self._relist is not None
            log.info("MCP server %s: connected, protocol %s (start %d)", self.key, self.protocol, self.starts)
            while not ended.is_set() and not current.end.is_set():
                waiters = [
                    asyncio.ensure_future(ended.wait()),
                    asyncio.ensure_future(self._relist.wait()),
                    asyncio.ensure_future(current.end.wait()),
                ]
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiter in waiters:
                        waiter.cancel()
                if self._relist.is_set() and not ended.is_set() and not current.end.is_set():
                    self._relist.clear()
                    try:
                        with anyio.fail_after(HANDSHAKE_TIMEOUT_S):
                            relisted = await list_tools(session)
                        if relisted != listed:
                            listed = relisted
                            self._on_tools(self, listed)
                    except Exception as error:
                        log.warning("MCP server %s: listing its tools again failed: %s", self.key, describe(error))

    async def _listen_for_changes(self, client: Client) -> None:
        """A modern server's `subscriptions/listen` stream: a changed tool list is listed again.

        The stream ends when the HTTP read timeout passes without a notice (the SDK has no
        keep-alive for it); it is opened again, at most once every `LISTEN_REOPEN_S`, and the
        tools listed again since a change may have passed unseen (the round ends the loop)."""
        assert self._relist is not None
        while True:
            opened = time.monotonic()
            try:
                async with client.listen(tools_list_changed=True) as changes:
                    async for event in changes:
                        if isinstance(event, ToolsListChanged):
                            self._relist.set()
            except Exception as error:  # lost: open it again below
                log.debug("MCP server %s: its change notices stopped: %s", self.key, describe(error))
            await asyncio.sleep(max(0.0, LISTEN_REOPEN_S - (time.monotonic() - opened)))
            self._relist.set()

    async def _open(self, stack: AsyncExitStack) -> tuple[Any, Any]:
        config = self.config
        if isinstance(config, StdioServer):
            params = StdioServerParameters(command=config.command, args=config.args, env=config.env, cwd=config.cwd)
            reader, writer = os.pipe()
            errlog = os.fdopen(writer, "w", encoding="utf-8", errors="replace")
            try:
                streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            finally:
                errlog.close()  # the child holds its own copy: the reader sees the end when it exits
                threading.Thread(
                    target=log_stderr, args=(reader, self.key), name=f"mcp-{self.key}-stderr", daemon=True
                ).start()
            return streams
        assert isinstance(config, HttpServer)
        if not config.trusted:  # a clear refusal up front; the pool checks every connection again
            url = anyio_url(config.url)
            await vetted_addresses(url[0], url[1])
        number = self.starts
        client = await stack.enter_async_context(
            http_client(
                config.headers,
                trusted=config.trusted,
                read_timeout_s=config.timeout_s + 5,
                observer=HttpObserver(on_expired=lambda: self._note_expired(number), on_late=self._note_late),
            )
        )
        return await stack.enter_async_context(streamable_http_client(config.url, http_client=client))

    def _note_late(self) -> None:
        self.late_answers += 1

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification) and self._relist is not None:
            self._relist.set()
        elif isinstance(message, Exception):
            log.warning("MCP server %s sent something unreadable: %s", self.key, describe(message))


def _announces_changes(session: ClientSession) -> bool:
    """A modern-era server that says its tool list can change (the notices come by `listen`)."""
    capabilities = session.server_capabilities
    return (
        session.protocol_version in MODERN_PROTOCOL_VERSIONS
        and capabilities is not None
        and capabilities.tools is not None
        and bool(capabilities.tools.list_changed)
    )


def anyio_url(url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


async def list_tools(session: ClientSession) -> list[types.Tool]:
    """Every tool the server lists, following at most `MAX_LIST_PAGES` pages."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


@asynccontextmanager
async def _streams(read: Any, write: Any) -> AsyncIterator[tuple[Any, Any]]:
    """An opened transport's two streams as the SDK's `Transport` (the round owns their lives)."""
    yield read, write


async def _relay(source: Any, sink: MemoryObjectSendStream[SessionMessage | Exception], ended: anyio.Event) -> None:
    """Pass the transport's messages to the session, and note when the transport ends."""
    try:
        async with sink:
            async for item in source:
                await sink.send(item)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
        pass
    finally:
        ended.set()


def describe(error: BaseException) -> str:
    """One line for the log: the innermost errors of an exception group, by type and text."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in error.exceptions[:3])
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:500]


def log_stderr(fd: int, key: str) -> None:
    """Log a child's stderr until it closes, bounded in line length and lines per minute."""
    window_start, lines, dropped = time.monotonic(), 0, 0
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as stream:
        while True:
            line = stream.readline(MAX_STDERR_LINE + 1)
            if not line:
                break
            if not line.endswith("\n"):  # a longer line: the rest of it is skipped
                while (rest := stream.readline(64 * 1024)) and not rest.endswith("\n"):
                    pass
            now = time.monotonic()
            if now - window_start >= 60:
                if dropped:
                    log.warning("MCP server %s: %d stderr lines not logged", key, dropped)
                window_start, lines, dropped = now, 0, 0
            if lines >= STDERR_LINES_PER_MINUTE:
                dropped += 1
                continue
            lines += 1
            log.info("MCP server %s stderr: %s", key, line.rstrip()[:MAX_STDERR_LINE])
    if dropped:
        log.warning("MCP server %s: %d stderr lines not logged", key, dropped)
