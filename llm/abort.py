"""Stopping a provider call that is blocked in a socket read, from another thread.

`requests` only knows per-read timeouts: a server that trickles a byte every few seconds
never trips them, and nothing in `requests` lets another thread stop a `recv` that waits for
the reply's headers (before there is a response object to close). So the connections of a
provider's session report their socket to the call using it (a `CallHandle`, found through a
context variable that `calling` sets around the POST); when the call's deadline passes or its
`CancelToken` is cancelled, the handle shuts that socket down, which wakes the blocked `recv`
at once, and records why, so that the reader reports TIMEOUT or CANCELLED rather than a broken
connection. A socket shut this way is never reused: urllib3 checks a pooled connection before
reusing it and drops a shut one.

The hook is urllib3's documented one (a pool's `ConnectionCls`), installed by a `requests`
adapter that overrides pool construction only, never `send`: mounted mocks (`responses`) and
proxies behave as with any adapter. Without a socket (a mock, a SOCKS proxy) the call's
deadline and token are still checked after every read (`llm/transport.py`).
"""

from __future__ import annotations

import http.client
import io
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, cast

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import PoolManager

from llm.base import FailureKind

#: The call whose POST is running in this context; read by connections when they get a
#: socket. A ContextVar is a key, not shared state: every thread and task sees its own value.
_CURRENT_CALL: ContextVar[CallHandle | None] = ContextVar("provider_call", default=None)
READ_BUFFER = 2048  # bytes read from a provider's socket at a time (a piece of a streamed answer is far smaller)


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


@contextmanager
def calling(handle: CallHandle) -> Iterator[None]:
    """Connections used inside this block report their socket to ``handle``."""
    token = _CURRENT_CALL.set(handle)
    try:
        yield
    finally:
        _CURRENT_CALL.reset(token)


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


class LeanResponse(http.client.HTTPResponse):
    """http.client's response reading its socket through a `READ_BUFFER`-byte buffer instead of
    8 KiB: a streamed answer comes in pieces of a few hundred bytes, and a call that waits
    minutes for its model's first token holds its buffer all that while (issue 38: a held turn's
    memory; figures in bench/README.md). Only the buffer's size differs."""

    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp.close()  # the default buffer, unread: its socket stays open (only its file closes)
        self.fp = cast(io.BufferedReader, sock.makefile("rb", buffering=READ_BUFFER))


class ReportingHTTPConnection(_ReportsSocket, HTTPConnection):
    response_class = LeanResponse


class ReportingHTTPSConnection(_ReportsSocket, HTTPSConnection):
    response_class = LeanResponse


class ReportingHTTPPool(HTTPConnectionPool):
    ConnectionCls = ReportingHTTPConnection


class ReportingHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = ReportingHTTPSConnection


def _use_reporting_pools(manager: PoolManager) -> None:
    """Swap in the reporting pools, unless the manager brings its own (SOCKS proxies)."""
    if manager.pool_classes_by_scheme.get("http") is HTTPConnectionPool:
        manager.pool_classes_by_scheme = {"http": ReportingHTTPPool, "https": ReportingHTTPSPool}


class AbortableAdapter(HTTPAdapter):
    """A `requests` adapter whose connections report their sockets."""

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
