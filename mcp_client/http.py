"""The HTTP client of one streamable-HTTP MCP server: a pooled `httpx2.AsyncClient` (the SDK's
HTTP library) with the operator's headers, the SSRF rules of `/open_url`, and a size cap.

- SSRF (unless the server is marked `trusted`): the connection pool's network backend resolves
  each host itself and connects only when every address is public, judged by
  `tools.safe_http.address_problem` (the rules of `/open_url`: loopback, private, link-local,
  CGNAT, metadata, their IPv6 forms), to the vetted address itself, so a DNS answer that
  changes between check and connect cannot switch the target. The check runs on every new
  connection, redirects included.
- Size: the body of one answer to a request is at most `MAX_RESPONSE_BYTES`; past it the read
  fails as an unreadable answer, which the SDK turns into an error for that one call (the
  session and the other calls go on). A stream of server events (the GET stream of
  notifications, an SSE answer) is bounded per event by the SDK (`max_sse_event_size`).
- Late answers: a call puts its deadline in `CALL_DEADLINE` (the SDK runs a request's POST in
  the context of the task that sent it); the body of an answer to that POST is read only
  until then (and `LATE_GRACE_S`), each chunk waited for no longer than the time left. An answer that arrives
  after the deadline (the call has already failed `TIMEOUT`) is dropped unread and its
  connection closed, so a hostile server cannot make us read and hold what nobody waits for.
- Expired sessions: a 404 to a request that carried our `Mcp-Session-Id` is the transport
  spec's "session not found"; the observer is told (`HttpObserver.on_expired`), and the
  connection makes a new session.
- Connections are kept alive and reused between calls (`MAX_CONNECTIONS` per server).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator, Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import anyio
import httpcore2
import httpx2
from httpcore2._backends.auto import AutoBackend
from httpcore2._backends.base import AsyncNetworkBackend, AsyncNetworkStream
from httpcore2._types import SOCKET_OPTION

from tools.safe_http import address_problem

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
MAX_CONNECTIONS = 16
CONNECT_TIMEOUT_S = 10.0
SESSION_HEADER = "mcp-session-id"
LATE_GRACE_S = 0.25  # past the deadline, so the SDK's own timeout answers the call first (TIMEOUT)

#: the deadline (anyio clock) of the call whose request is being sent; None: no call (a listing)
CALL_DEADLINE: ContextVar[float | None] = ContextVar("mcp_call_deadline", default=None)


@dataclass(frozen=True)
class HttpObserver:
    """What the connection wants to hear from its HTTP client."""

    on_expired: Callable[[], None] = lambda: None  # a 404 to our session id
    on_late: Callable[[], None] = lambda: None  # an answer dropped: it came after the call's deadline


class Refused(httpcore2.ConnectError):
    """The server's address is not public and the server is not marked trusted."""


class ResponseTooLarge(httpx2.StreamError):
    """An answer longer than `MAX_RESPONSE_BYTES` (a `StreamError`: the SDK fails that one call)."""


class AnswerTooLate(httpx2.StreamError):
    """The rest of an answer came after the call's deadline: dropped unread."""


async def vetted_addresses(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, when all are public; else `Refused` naming the rule."""
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise httpcore2.ConnectError(f"cannot resolve {host}: {error}") from None
    addresses = [str(info[4][0]).split("%")[0] for info in infos]
    for address in addresses:
        problem = address_problem(ipaddress.ip_address(address))
        if problem is not None:
            raise Refused(
                f"{host} is {problem} ({address}): refused by the SSRF rules; "
                'an operator can mark this server "trusted": true in MCP_SERVERS'
            )
    if not addresses:
        raise httpcore2.ConnectError(f"{host} resolves to no address")
    return addresses


class VettedBackend(AsyncNetworkBackend):
    """Connects only to public addresses, and to the address it vetted."""

    def __init__(self) -> None:
        self._inner = AutoBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        addresses = await vetted_addresses(host, port)
        return await self._inner.connect_tcp(
            addresses[0], port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[SOCKET_OPTION] | None = None
    ) -> AsyncNetworkStream:
        raise Refused("unix sockets are not used for MCP servers")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _CappedStream(httpx2.AsyncByteStream):
    """An answer's body: at most `max_bytes` (when capped), read only until `deadline`."""

    def __init__(
        self, inner: httpx2.AsyncByteStream, max_bytes: int | None, deadline: float | None, on_late: Callable[[], None]
    ) -> None:
        self._inner, self._max, self._deadline, self._on_late = inner, max_bytes, deadline, on_late

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        chunks = self._inner.__aiter__()
        while True:
            chunk = await self._next(chunks)
            if chunk is None:
                return
            seen += len(chunk)
            if self._max is not None and seen > self._max:
                raise ResponseTooLarge(f"the server's answer is larger than {self._max // (1024 * 1024)} MiB")
            yield chunk

    async def _next(self, chunks: AsyncIterator[bytes]) -> bytes | None:
        """The next chunk (None at the end), waited for no longer than the deadline allows."""
        if self._deadline is None:
            return await anext(chunks, None)
        chunk: bytes | None = None
        late_at = self._deadline + LATE_GRACE_S
        with anyio.move_on_at(late_at) as waiting:
            chunk = await anext(chunks, None)
        if waiting.cancelled_caught or (chunk is not None and anyio.current_time() > late_at):
            self._on_late()
            await self._inner.aclose()
            raise AnswerTooLate("the server's answer came after the call's deadline")
        return chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """The pool, with the body of each answer to a POST (a request's answer) capped and read
    only until its call's deadline; a 404 to our session id reported."""

    def __init__(
        self,
        inner: httpx2.AsyncHTTPTransport,
        max_bytes: int = MAX_RESPONSE_BYTES,
        observer: HttpObserver | None = None,
    ) -> None:
        self._inner, self._max = inner, max_bytes
        self._observer = observer or HttpObserver()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        deadline = CALL_DEADLINE.get()
        response = await self._inner.handle_async_request(request)
        if response.status_code == 404 and SESSION_HEADER in request.headers:
            self._observer.on_expired()
        streamed = response.headers.get("content-type", "").startswith("text/event-stream")
        capped = request.method == "POST" and not streamed  # events are bounded one by one by the SDK
        if deadline is None and not capped:
            return response  # the stream of notifications, a listing's events
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            # a call's events resumed by a GET (Last-Event-ID) keep its deadline too
            stream=_CappedStream(response.stream, self._max if capped else None, deadline, self._observer.on_late),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def http_client(
    headers: dict[str, str], *, trusted: bool, read_timeout_s: float, observer: HttpObserver | None = None
) -> httpx2.AsyncClient:
    """The client of one server (its connections live as long as the server's session)."""
    inner = httpx2.AsyncHTTPTransport(
        trust_env=False,
        limits=httpx2.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS),
    )
    if not trusted:
        pool: Any = inner._pool  # the pool httpx2 built, given the vetting backend instead of its own
        inner._pool = httpcore2.AsyncConnectionPool(
            ssl_context=pool._ssl_context,
            max_connections=MAX_CONNECTIONS,
            max_keepalive_connections=MAX_CONNECTIONS,
            keepalive_expiry=pool._keepalive_expiry,
            network_backend=VettedBackend(),
        )
    return httpx2.AsyncClient(
        headers=headers,
        transport=CappedTransport(inner, observer=observer),
        timeout=httpx2.Timeout(CONNECT_TIMEOUT_S, read=read_timeout_s),
        follow_redirects=False,
    )
