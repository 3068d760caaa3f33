"""Abortable HTTP for provider calls: one deadline for the whole call, and a cancel that
interrupts a read blocked in the middle of a stream or before the headers.

`requests` only knows per-read timeouts: a server that trickles a byte every few seconds
never trips them, and nothing in `requests` lets another thread stop a `recv` that waits for
headers. So every connection of a provider's session reports its socket to the call using it
(a `CallHandle`, found through a context variable set around the POST); when the call's
deadline passes (the provider's `Watchdog`) or its `CancelToken` is cancelled, the handle
shuts that socket down, which wakes the blocked `recv` at once on Linux, and records why, so
that the reader reports TIMEOUT or CANCELLED rather than a broken connection. A socket shut
this way is never reused: urllib3 checks a pooled connection before reusing it and finds a
shut socket dropped. Without a socket (the `responses` mock, a SOCKS proxy, a session passed
in from outside) the same deadline and token are still checked after every read.

Each POST is prepared once per provider: for a plain `http://` server reached without a
proxy, as a `llm.direct.DirectPost` (our own HTTP/1.1 over a kept-alive socket, parsed
by httptools); for any other, as a `PostTemplate` sent straight through the session's
adapter (requests' per-call preparation of URL, headers, cookies and settings cost a third
of a call's CPU, for a request that never changes but for its body). Both hand their socket
to the call, and the rest of this module reads either kind of reply (`Reply`).

Bodies are read as they arrive (`llm/body.py`): everything received so far in one
read, instead of waiting for a full buffer, so a piece is handed on as soon as it is
received and a burst of chunks is handed on as one.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from http.client import HTTPException
from types import TracebackType
from typing import Any, Protocol

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import PoolManager

from foundation.cancellation import CancelToken, Watchdog
from llm.base import FailureKind
from llm.body import BodyReader, body_reader
from llm.direct import BrokenReply, DirectPost, UnsupportedCoding

SETTLE_GRACE_S = 0.5  # after a reply's terminator: how long the rest of the body may take

#: The call whose POST is running in this context; read by connections when they get a
#: socket. A ContextVar is a key, not shared state: every thread and task sees its own value.
_CURRENT_CALL: ContextVar[CallHandle | None] = ContextVar("provider_call", default=None)


class Reply(Protocol):
    """A reply whose head is in: a `requests.Response` or a `llm.direct.DirectResponse`."""

    status_code: int

    @property
    def headers(self) -> Any: ...  # a case-insensitive mapping of header names to values

    def close(self) -> None: ...


@dataclass(frozen=True)
class Broken:
    """Why an exchange stopped before the end of a body."""

    kind: FailureKind
    detail: str


def _shut(sock: socket.socket) -> None:
    """Shut both directions: wakes a thread blocked in recv on this socket (closing it from
    another thread would not, and could hit a reused descriptor). The plain-socket method is
    called so that a TLS socket is shut at the TCP level too."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed or never connected


class CallHandle:
    """One call's hold on its current socket, and why the call was aborted (if it was).

    An abort that comes before any socket exists is applied when one is attached.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._reason: FailureKind | None = None
        self._done = False

    @property
    def reason(self) -> FailureKind | None:
        return self._reason

    @property
    def current_socket(self) -> socket.socket | None:
        """The socket of the current request (None before one exists, or without one)."""
        return self._sock

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            if self._done:
                return
            self._sock = sock
            if self._reason is not None:
                _shut(sock)

    def forget(self, sock: socket.socket) -> None:
        """The connection went to another call: aborting this one must not touch it."""
        with self._lock:
            if self._sock is sock:
                self._sock = None

    def abort(self, reason: FailureKind) -> None:
        """Record ``reason`` (the first one wins) and shut the socket now."""
        with self._lock:
            if self._done or self._reason is not None:
                return
            self._reason = reason
            if self._sock is not None:
                _shut(self._sock)

    def finish(self) -> None:
        """The call is over: later aborts do nothing, and the socket is no longer held."""
        with self._lock:
            self._done = True
            self._sock = None


class _ReportsSocket:
    """Mixed into urllib3 connections: tell the current call which socket it is using, on
    connect and on every request over a reused connection."""

    sock: socket.socket | None
    _provider_call: CallHandle | None = None

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]  # a mixin: the concrete class's base (urllib3's connection) has it
        self._report()

    def request(self, *args: Any, **kwargs: Any) -> None:
        if self.sock is not None:
            self._report()
        super().request(*args, **kwargs)  # type: ignore[misc]  # a mixin, as in connect()

    def _report(self) -> None:
        handle = _CURRENT_CALL.get()
        previous, self._provider_call = self._provider_call, handle
        if self.sock is None:
            return
        if previous is not None and previous is not handle:
            previous.forget(self.sock)
        if handle is not None:
            handle.attach(self.sock)


class ReportingHTTPConnection(_ReportsSocket, HTTPConnection):
    pass


class ReportingHTTPSConnection(_ReportsSocket, HTTPSConnection):
    pass


class ReportingHTTPPool(HTTPConnectionPool):
    ConnectionCls = ReportingHTTPConnection


class ReportingHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = ReportingHTTPSConnection


def _use_reporting_pools(manager: PoolManager) -> None:
    """Swap in the reporting pools, unless the manager brings its own (SOCKS proxies)."""
    if manager.pool_classes_by_scheme.get("http") is HTTPConnectionPool:
        manager.pool_classes_by_scheme = {"http": ReportingHTTPPool, "https": ReportingHTTPSPool}


class AbortableAdapter(HTTPAdapter):
    """A `requests` adapter whose connections report their sockets. It overrides pool
    construction only, never `send`, so `responses` mocks and proxies behave as before."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        _use_reporting_pools(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> PoolManager:
        manager: PoolManager = super().proxy_manager_for(proxy, **proxy_kwargs)
        _use_reporting_pools(manager)
        return manager


def mount_abortable(session: requests.Session) -> requests.Session:
    adapter = AbortableAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _exception_kind(exc: BaseException) -> tuple[FailureKind, str]:
    """Map what `requests`/urllib3 raise to a failure class (timeouts first: a connect
    timeout is also a connection error)."""
    if isinstance(exc, (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)):
        return FailureKind.TIMEOUT, type(exc).__name__
    if isinstance(exc, UnsupportedCoding):
        return FailureKind.MALFORMED, str(exc)
    if isinstance(exc, urllib3.exceptions.DecodeError):
        return FailureKind.MALFORMED, "could not decode the body"
    if isinstance(exc, BrokenReply):
        return FailureKind.CONNECTION, str(exc)
    return FailureKind.CONNECTION, type(exc).__name__


class PostTemplate:
    """One endpoint's POST, prepared once: each call sends a copy with its own body.

    It goes through the session's adapter (`HTTPAdapter.send`), so mounted adapters, proxies
    and `responses` mocks see it as they see any request of the session, but nothing of
    `Session.send` runs: no cookies are kept (a provider API needs none) and no redirect is
    followed. A redirect comes back as the 3xx it is; following it would resend the prompt,
    and a POST turned into a GET, to wherever the server points.
    """

    def __init__(self, session: requests.Session, url: str, headers: dict[str, str]) -> None:
        prepared = session.prepare_request(requests.Request("POST", url, headers=headers))
        self.url = prepared.url or url
        self._headers = prepared.headers
        self._adapter = session.get_adapter(self.url)
        settings = session.merge_environment_settings(self.url, {}, True, None, None)
        verify = settings["verify"]
        self._verify: bool | str = True if verify is None else verify
        self._cert = settings["cert"]
        self._proxies = settings["proxies"]

    def send(self, body: bytes, timeout_s: float, holder: CallHandle) -> requests.Response:
        """POST `body`; returns once the headers are in (the body is left to be read). The
        connection reports its socket to `holder` (through `_CURRENT_CALL`)."""
        request = requests.PreparedRequest()
        request.method = "POST"
        request.url = self.url
        request.headers = self._headers.copy()
        request.headers["Content-Length"] = str(len(body))
        request.body = body
        token = _CURRENT_CALL.set(holder)
        try:
            return self._adapter.send(
                request, stream=True, timeout=timeout_s, verify=self._verify, cert=self._cert, proxies=self._proxies
            )
        finally:
            _CURRENT_CALL.reset(token)

    def close(self) -> None:
        """The session's pooled connections belong to the session: nothing to close here."""


def prepare_post(session: requests.Session, url: str, headers: dict[str, str]) -> PostTemplate | DirectPost:
    """The fastest POST that can reach `url` as configured: direct for a plain `http://` URL
    without a proxy, through the session otherwise (TLS, proxies, credentials in the URL)."""
    if url.startswith("http://") and requests.utils.select_proxy(url, session.proxies) is None:
        try:
            return DirectPost(url, headers)
        except ValueError:  # credentials in the URL, a header that cannot go on the wire as is
            pass
    return PostTemplate(session, url, headers)


class Exchange:
    """One provider call's HTTP traffic: POSTs (a 429 retry makes several) whose bodies are
    read as they arrive, under one deadline and one cancel token.

    Use as a context manager: entering arms the deadline and the cancel interrupt, leaving
    disarms them and closes every response that was not read to its end, so that neither an
    early return nor an exception (a sink that raises) leaves a connection half-read.
    """

    def __init__(
        self,
        template: PostTemplate | DirectPost,
        watchdog: Watchdog,
        *,
        cancel: CancelToken,
        deadline: float,
        timeout_s: float,
        max_bytes: int,
    ) -> None:
        self._template = template
        self._watchdog = watchdog
        self._cancel = cancel
        self._deadline = deadline  # time.monotonic() value
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        self._handle = CallHandle()
        self._bodies: dict[Reply, BodyReader] = {}  # every response of the call, and its reader
        self._disarm: list[Callable[[], None]] = []
        self.received = 0  # body bytes read, all responses of the call

    def __enter__(self) -> Exchange:
        handle = self._handle
        delay = max(0.0, self._deadline - time.monotonic())
        self._disarm.append(self._watchdog.schedule(delay, lambda: handle.abort(FailureKind.TIMEOUT)))
        self._disarm.append(self._cancel.on_cancel(lambda: handle.abort(FailureKind.CANCELLED)))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for disarm in self._disarm:
            disarm()
        for response in self._bodies:
            response.close()  # a no-op for a body read to its end (its connection is pooled)
        self._handle.finish()

    def interrupted(self) -> Broken | None:
        """TIMEOUT or CANCELLED when the call must stop now (checked between reads)."""
        reason = self._handle.reason
        if reason is None and self._cancel.cancelled:
            reason = FailureKind.CANCELLED
        if reason is None and time.monotonic() >= self._deadline:
            reason = FailureKind.TIMEOUT
        if reason is None:
            return None
        if reason is FailureKind.CANCELLED:
            return Broken(reason, "cancelled")
        return Broken(reason, f"no complete reply within {self._timeout_s:g} s")

    def post(self, body: bytes) -> Reply | Broken:
        """Send the request and return once the headers are in (the body is not read)."""
        stop = self.interrupted()
        if stop is not None:
            return stop
        try:
            response = self._template.send(body, self._timeout_s, self._handle)
        except (requests.RequestException, urllib3.exceptions.HTTPError, HTTPException, OSError) as exc:
            return self._failed(exc)
        self._bodies[response] = body_reader(response)
        return self.interrupted() or response

    def read(self, response: Reply) -> bytes | Broken:
        """What has arrived of the body (waiting for at least one byte); ``b""`` at its end."""
        try:
            data = self._bodies[response].read()
        except (urllib3.exceptions.HTTPError, HTTPException, OSError) as exc:
            return self._failed(exc)
        stop = self.interrupted()
        if stop is not None:  # also when the abort made the read look like a clean end
            return stop
        self.received += len(data)
        if self.received > self._max_bytes:
            self.discard(response)
            return Broken(FailureKind.MALFORMED, f"reply too large (over {self._max_bytes} bytes)")
        return data

    def read_body(self, response: Reply, limit: int | None) -> bytes | Broken:
        """The whole body, or its first ``limit`` bytes (then the rest is not read and the
        connection is dropped). The call's ``max_bytes`` applies either way."""
        parts: list[bytes] = []
        size = 0
        while limit is None or size < limit:
            data = self.read(response)
            if isinstance(data, Broken):
                return data
            if not data:
                body = b"".join(parts)
                if isinstance(response, requests.Response):
                    response._content = body  # keeps `response.content` meaningful for whoever
                return body  # inspects the response later (the `responses` call log does)
            parts.append(data)
            size += len(data)
        self.discard(response)
        return b"".join(parts)[:limit]

    def settle(self, response: Reply) -> None:
        """After the reply's terminator: read what is left (normally just the end of the
        chunked body, already received) so that the connection can be reused; a server that
        keeps the stream open after its terminator is cut off after a short grace. Nothing
        read here can turn the call into a failure.

        The grace is the socket's own timeout, set before each read to what is left of it,
        not a watchdog entry: that would be the earliest deadline of the process and wake
        the watchdog's thread once per call, a thread switch on every reply. Without a
        socket (a mocked response) reads never block."""
        sock = self._handle.current_socket
        grace_ends = time.monotonic() + SETTLE_GRACE_S
        for _ in range(64):  # a terminator is followed by a few bytes, not a body
            left = grace_ends - time.monotonic()
            if left <= 0:
                break
            try:
                if sock is not None:
                    sock.settimeout(left)  # urllib3 sets its own again before the next request
                data = self._bodies[response].read()
            except (urllib3.exceptions.HTTPError, HTTPException, OSError):
                break
            self.received += len(data)
            if not data:
                return
        self.discard(response)

    def discard(self, response: Reply) -> None:
        """Close now without reading the rest: the server sees the client hang up, and the
        connection is not reused."""
        response.close()

    def _failed(self, exc: BaseException) -> Broken:
        stop = self.interrupted()
        if stop is not None:  # the shut socket surfaced as a broken connection
            return stop
        kind, detail = _exception_kind(exc)
        return Broken(kind, detail)
