"""One provider call's HTTP traffic, through `requests`, under its two timers and one cancel.

Every provider call goes through a `requests.Session` (`provider_session`): TLS, CA
bundles, proxies and connection pooling are the library's, for a local model server and a
hosted API alike. What this module adds is what `requests` lacks for a model's streamed
reply: timers that fit a model (not per read), a cancel that interrupts a read blocked
before or inside the body (`llm/abort.py` shuts the socket), the body read as it arrives
(urllib3's `read1`: each piece is handed on once it is received, not once a buffer is full),
bounded bodies, and the mapping of what the libraries raise to `FailureKind`.

The two timers (SPEC 7a.1): until the answer's first piece arrives, one deadline counts from
the start of the call (`LLM_TIMEOUT_S`: connect, headers, a cold model loading and reading
the prompt); a call that misses it ends as TIMEOUT. Once the answer has started, only the
server's silence counts: a read that waits longer than `LLM_IDLE_TIMEOUT_S` for any byte
ends the call as IDLE_TIMEOUT. An answer that keeps streaming is never cut by a timer; its
length is bounded by `LLM_MAX_TOKENS`, the reply caps and `max_bytes`. Time the caller spends
with a piece (its sink) is not silence of the server: the idle timer runs only while a read
waits. Both timers are one watchdog entry, re-armed when it fires early, not one per read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.client import HTTPException
from http.cookiejar import DefaultCookiePolicy
from types import TracebackType

import requests
import urllib3

from foundation.cancellation import CancelToken, Watchdog
from llm.abort import CallHandle, calling, mount_abortable
from llm.base import FailureKind, configure_session

READ_SIZE = 64 * 1024  # the most one read hands on; a read returns what has arrived, up to this
SETTLE_GRACE_S = 0.5  # after a reply's terminator: how long the rest of the body may take

_NETWORK_ERRORS = (requests.RequestException, urllib3.exceptions.HTTPError, HTTPException, OSError)


class ProviderSession(requests.Session):
    """A session that never follows a redirect: following one would resend the prompt (and,
    for 301/302, a POST turned into a GET) wherever the server points. The 3xx comes back as
    it is, so the failure can name the address; requests would also read a redirect's whole
    body, unbounded, even when not following it."""

    def get_redirect_target(self, resp: requests.Response) -> str | None:
        return None


def provider_session(base_url: str) -> requests.Session:
    """The session of one HTTP provider: abortable connections, no redirects, no cookies (a
    provider API needs none, and a session must not carry one call's state into the next)."""
    session = ProviderSession()
    configure_session(session, base_url)
    session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
    return mount_abortable(session)


@dataclass(frozen=True)
class Broken:
    """Why an exchange stopped before the end of a body."""

    kind: FailureKind
    detail: str


def _exception_kind(exc: BaseException) -> tuple[FailureKind, str]:
    """Map what `requests`/urllib3 raise to a failure class (timeouts first: a connect
    timeout is also a connection error; a request that cannot be built is configuration)."""
    if isinstance(exc, (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)):
        return FailureKind.TIMEOUT, type(exc).__name__
    if isinstance(exc, (requests.exceptions.InvalidHeader, UnicodeError)):
        detail = "a request header (the API key) holds a character HTTP cannot carry, such as a line break"
        return FailureKind.NOT_CONFIGURED, detail
    if isinstance(
        exc, (requests.exceptions.MissingSchema, requests.exceptions.InvalidSchema, requests.exceptions.InvalidURL)
    ):
        return FailureKind.NOT_CONFIGURED, f"the base URL is not a usable URL ({type(exc).__name__})"
    if isinstance(exc, (urllib3.exceptions.DecodeError, requests.exceptions.ContentDecodingError)):
        return FailureKind.MALFORMED, "could not decode the body"
    return FailureKind.CONNECTION, type(exc).__name__


class Exchange:
    """One provider call's POSTs (a 429 retry makes several) and their bodies, under the
    call's first-token deadline, its idle timer and one cancel token.

    Use as a context manager: entering arms the timer and the cancel interrupt, leaving
    disarms them and closes every response that was not read to its end, so that neither an
    early return nor an exception (a sink that raises) leaves a connection half-read. The
    caller says when the answer has started (`answer_started`): from then on the idle timer
    replaces the first-token deadline.
    """

    def __init__(
        self,
        session: requests.Session,
        url: str,
        headers: dict[str, str],
        watchdog: Watchdog,
        *,
        cancel: CancelToken,
        deadline: float,
        timeout_s: float,
        idle_timeout_s: float,
        max_bytes: int,
    ) -> None:
        self._session = session
        self._url = url
        self._headers = headers
        self._watchdog = watchdog
        self._cancel = cancel
        self._deadline = deadline  # time.monotonic() value by which the answer must have started
        self._timeout_s = timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._max_bytes = max_bytes
        self._handle = CallHandle()
        self._responses: list[requests.Response] = []
        self._timer_lock = threading.Lock()
        self._unschedule: Callable[[], None] | None = None
        self._disarm_cancel: Callable[[], None] | None = None
        self._closed = False
        self._answering = False  # the answer's first piece has arrived
        self._waiting_since: float | None = None  # time.monotonic() when the read in progress began
        self.received = 0  # body bytes read, all responses of the call

    def __enter__(self) -> Exchange:
        handle = self._handle
        self._arm(self._deadline - time.monotonic())
        self._disarm_cancel = self._cancel.on_cancel(lambda: handle.abort(FailureKind.CANCELLED))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        with self._timer_lock:
            self._closed = True
            if self._unschedule is not None:
                self._unschedule()
                self._unschedule = None
        if self._disarm_cancel is not None:
            self._disarm_cancel()
        for response in self._responses:
            response.close()  # a no-op for a body read to its end (its connection is pooled)
        self._handle.finish()

    def answer_started(self) -> None:
        """The first piece of the answer is in: the first-token deadline no longer applies,
        only the idle timer does (its entry replaces the deadline's)."""
        if self._answering:
            return
        self._answering = True
        self._arm(self._idle_timeout_s)

    def _arm(self, delay_s: float) -> None:
        """Schedule the timer's one watchdog entry (replacing the pending one, if any)."""
        with self._timer_lock:
            if self._closed:
                return
            if self._unschedule is not None:
                self._unschedule()
            self._unschedule = self._watchdog.schedule(max(0.0, delay_s), self._expire)

    def _expire(self) -> None:
        """The watchdog's entry: abort the call if a timer ran out, else wait for the next due time."""
        now = time.monotonic()
        if not self._answering:
            if now >= self._deadline:
                self._handle.abort(FailureKind.TIMEOUT)
                return
            self._arm(self._deadline - now)
            return
        waiting_since = self._waiting_since
        if waiting_since is None:  # between reads: the caller is busy with a piece, the server is not silent
            self._arm(self._idle_timeout_s)
        elif now >= waiting_since + self._idle_timeout_s:
            self._handle.abort(FailureKind.IDLE_TIMEOUT)
        else:
            self._arm(waiting_since + self._idle_timeout_s - now)

    def interrupted(self) -> Broken | None:
        """TIMEOUT, IDLE_TIMEOUT or CANCELLED when the call must stop now (checked between reads)."""
        reason = self._handle.reason
        if reason is None and self._cancel.cancelled:
            reason = FailureKind.CANCELLED
        if reason is None and not self._answering and time.monotonic() >= self._deadline:
            reason = FailureKind.TIMEOUT
        return None if reason is None else self._broken(reason)

    def _broken(self, reason: FailureKind) -> Broken:
        if reason is FailureKind.CANCELLED:
            return Broken(reason, "cancelled")
        if reason is FailureKind.IDLE_TIMEOUT:
            return Broken(reason, f"the answer stopped: nothing received for {self._idle_timeout_s:g} s")
        return Broken(reason, f"no first token within {self._timeout_s:g} s")

    def post(self, body: bytes) -> requests.Response | Broken:
        """Send the request and return once the headers are in (the body is not read)."""
        stop = self.interrupted()
        if stop is not None:
            return stop
        try:
            with calling(self._handle):
                response = self._session.send(
                    self._prepared(body),
                    stream=True,
                    # per socket operation, a backstop only: the watchdog enforces both timers
                    timeout=(self._timeout_s, max(self._timeout_s, self._idle_timeout_s)),
                    allow_redirects=False,
                )
        except (*_NETWORK_ERRORS, UnicodeError) as exc:  # UnicodeError: a header beyond Latin-1
            return self._failed(exc)
        self._responses.append(response)
        return self.interrupted() or response

    def _prepared(self, body: bytes) -> requests.PreparedRequest:
        """The POST as `requests` prepares it, without `Session.request`'s merging of
        per-request settings into the session's: a provider session carries no cookies (its
        policy accepts none), no auth and no hooks, and its proxies and CA bundle were resolved
        once (`configure_session`); `Session.send` still applies them (what it saves a call:
        bench/README.md, issue 38)."""
        prepared = requests.PreparedRequest()
        prepared.prepare(method="POST", url=self._url, headers={**self._session.headers, **self._headers}, data=body)
        return prepared

    def read(self, response: requests.Response) -> bytes | Broken:
        """What has arrived of the body (waiting for at least one byte); ``b""`` at its end."""
        self._waiting_since = time.monotonic()
        try:
            data = response.raw.read1(READ_SIZE, decode_content=True) or b""
        except _NETWORK_ERRORS as exc:
            return self._failed(exc)
        finally:
            self._waiting_since = None
        stop = self.interrupted()
        if stop is not None:  # also when the abort made the read look like a clean end
            return stop
        self.received += len(data)
        if self.received > self._max_bytes:
            self.discard(response)
            return Broken(FailureKind.MALFORMED, f"reply too large (over {self._max_bytes} bytes)")
        return data

    def read_body(self, response: requests.Response, limit: int | None) -> bytes | Broken:
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
                response._content = body  # `response.content` stays meaningful for whoever
                return body  # inspects the response later (the `responses` call log does)
            parts.append(data)
            size += len(data)
        self.discard(response)
        return b"".join(parts)[:limit]

    def settle(self, response: requests.Response) -> None:
        """After the reply's terminator: read what is left (normally just the end of the
        chunked body, already received) so that the connection can be reused; a server that
        keeps the stream open after its terminator is cut off after a short grace. Nothing
        read here can turn the call into a failure.

        The grace is the socket's own timeout, set before each read to what is left of it,
        rather than a watchdog entry, which would wake the watchdog's thread once per call.
        Without a socket (a mocked response) reads never block."""
        sock = self._handle.current_socket
        grace_ends = time.monotonic() + SETTLE_GRACE_S
        for _ in range(64):  # a terminator is followed by a few bytes, not a body
            left = grace_ends - time.monotonic()
            if left <= 0:
                break
            try:
                if sock is not None:
                    sock.settimeout(left)  # urllib3 sets its own again before the next request
                data = response.raw.read1(READ_SIZE, decode_content=True) or b""
            except _NETWORK_ERRORS:
                break
            self.received += len(data)
            if not data:
                return
        self.discard(response)

    def discard(self, response: requests.Response) -> None:
        """Close now without reading the rest: the server sees the client hang up, and the
        connection is not reused."""
        response.close()

    def _failed(self, exc: BaseException) -> Broken:
        stop = self.interrupted()
        if stop is not None:  # the shut socket surfaced as a broken connection
            return stop
        kind, detail = _exception_kind(exc)
        if kind is FailureKind.TIMEOUT and self._answering:  # the socket's own timeout, mid-answer
            return self._broken(FailureKind.IDLE_TIMEOUT)
        return Broken(kind, detail)
