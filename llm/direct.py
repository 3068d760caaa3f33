"""Direct HTTP/1.1 for provider calls to a plain `http://` server: a local model server
(Ollama, llama.cpp, vLLM) reached without a proxy, where the model is fast and every
millisecond of the client shows.

Through `requests` a loopback provider call cost about 0.6 ms of CPU: the adapter (proxy
selection, TLS context, cookie extraction, response building), urllib3's pool, and
http.client, which parses a reply's headers with the `email` package. Here one call is a
`sendall` of a head prepared once plus the body, and `recv` calls whose bytes go to
httptools' C parser (the one uvicorn serves our own requests with): about 0.2 ms, and
1.6 M fewer instructions per plain turn (`bench/README.md`). `https://` servers, proxies and
URLs with credentials stay on `requests` (`llm.transport.PostTemplate`): there the
network dominates, and TLS and proxy handling are better left to it.

What it keeps of the requests path: one deadline for the whole call and a cancel that wakes
a blocked `recv` (the socket is handed to the call's `attach`, which shuts it on abort);
replies read as they arrive (one `recv` takes everything received, however many chunks);
redirects reported, not followed (the caller sees the 3xx); keep-alive connections reused
only when the previous reply ended exactly at its end. It adds a retry that urllib3 does
not make: a kept-alive connection that the server had already closed (its idle timeout ran
out while the request was on its way) is replaced by a new one once, when not one byte of
the reply came back.
"""

from __future__ import annotations

import select
import socket
import threading
import zlib
from collections import deque
from collections.abc import Callable
from typing import Protocol
from urllib.parse import urlsplit

import httptools
import urllib3
from requests.structures import CaseInsensitiveDict

READ_SIZE = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024  # a reply's status line and headers; a model server sends a few hundred
MAX_IDLE = 8  # kept-alive connections per server beyond that are closed
ZLIB_AUTO = 47  # zlib's wbits for "gzip or zlib header, whichever it is"


class SocketHolder(Protocol):
    """The call a connection serves (`llm.transport.CallHandle`): it may shut the socket
    to abort the call, until the connection goes back to the pool."""

    @property
    def reason(self) -> object:
        """Why the call was aborted (None while it goes on)."""

    def attach(self, sock: socket.socket) -> None: ...

    def forget(self, sock: socket.socket) -> None: ...


class NotDirect(ValueError):
    """The URL needs what only `requests` does here: TLS, credentials in the URL."""


class BrokenReply(ConnectionError):
    """The reply broke off or is not HTTP; the message says how (our words, never its bytes)."""


class UnsupportedCoding(urllib3.exceptions.DecodeError):
    """The body is in a content coding other than identity, gzip or deflate."""


def _header_value(name: str, value: str) -> str:
    if "\r" in value or "\n" in value:
        raise NotDirect(f"the {name} header holds a line break")
    return value


class DirectPost:
    """One endpoint's POST, its head prepared once, and the server's idle connections."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.username or parts.password:
            raise NotDirect("only a plain http:// URL without credentials is served directly")
        self.url = url
        self._address = (parts.hostname, parts.port or 80)
        target = parts.path or "/"
        if parts.query:
            target = f"{target}?{parts.query}"
        lines = [f"POST {target} HTTP/1.1", f"Host: {parts.netloc}"]
        lines += [f"{name}: {_header_value(name, value)}" for name, value in headers.items()]
        lines += ["Accept-Encoding: identity", "Content-Length: "]
        self._head = "\r\n".join(lines).encode("latin-1")  # raises for a non-Latin-1 header: not direct
        self._idle: deque[socket.socket] = deque()
        self._lock = threading.Lock()

    def send(self, body: bytes, timeout_s: float, holder: SocketHolder) -> DirectResponse:
        """POST `body`; returns once the reply's head is in (the body is left to be read).
        Raises `OSError` (a timeout, a refused or broken connection)."""
        request = b"".join((self._head, str(len(body)).encode("ascii"), b"\r\n\r\n", body))
        reused = self._take_idle()
        if reused is not None:
            response = self._exchange(reused, request, timeout_s, holder)
            if response is not None:
                return response
        sock = socket.create_connection(self._address, timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        response = self._exchange(sock, request, timeout_s, holder, fresh=True)
        assert response is not None  # a fresh connection raises instead
        return response

    def _exchange(
        self, sock: socket.socket, request: bytes, timeout_s: float, holder: SocketHolder, *, fresh: bool = False
    ) -> DirectResponse | None:
        """Send and read the head; None when a reused connection turned out to be closed
        before any byte of the reply (the caller then opens a new one), unless the call was
        aborted meanwhile."""
        holder.attach(sock)
        sock.settimeout(timeout_s)
        response = DirectResponse(sock, holder, self._give_back)
        try:
            sock.sendall(request)
            response.read_head()
        except OSError:
            response.close()
            if fresh or response.received or holder.reason is not None:
                raise
            return None
        except BaseException:  # an unreadable head (its content coding): the socket is not left open
            response.close()
            raise
        return response

    def _take_idle(self) -> socket.socket | None:
        """A kept-alive connection still open and quiet (a readable one was closed by the
        server, or sent something unasked: neither can carry a request)."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                sock = self._idle.pop()
            if _quiet(sock):
                return sock
            sock.close()

    def _give_back(self, sock: socket.socket) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(sock)
                return
        sock.close()

    def close(self) -> None:
        """Close the idle connections (the provider is being discarded)."""
        with self._lock:
            idle, self._idle = list(self._idle), deque()
        for sock in idle:
            sock.close()


def _quiet(sock: socket.socket) -> bool:
    """Nothing to read right now (`poll`: `select` fails above descriptor 1023, and a server
    holding thousands of streams has more)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return not poller.poll(0)


class DirectResponse:
    """A reply read from its socket by httptools: the status and headers once the head is in,
    then the body as it arrives (`read`). Its connection goes back to the pool when the body
    ended exactly at its end and the server keeps the connection alive; otherwise it is
    closed with the response."""

    def __init__(self, sock: socket.socket, holder: SocketHolder, give_back: Callable[[socket.socket], None]) -> None:
        self._sock: socket.socket | None = sock
        self._holder = holder
        self._give_back = give_back
        self._parser = httptools.HttpResponseParser(self)
        self.status_code = 0
        self.headers: CaseInsensitiveDict[str] = CaseInsensitiveDict()
        self._head_done = False
        self._interim = False  # the head just read was an interim reply's (1xx)
        self._complete = False
        self._keep_alive = False  # set at the reply's end; cleared by anything after it
        self._pieces: list[bytes] = []
        self._decoder: zlib._Decompress | None = None
        self._refusal: Exception | None = None  # found by a callback, raised once the parser returns
        self._head_bytes = 0  # status line and header fields, as the parser hands them over
        self.received = 0  # bytes read from the socket, head included

    # httptools' callbacks
    def on_message_begin(self) -> None:
        if self._complete:  # bytes after the reply's end: it stands, the connection is not reused
            self._keep_alive = False

    def on_status(self, status: bytes) -> None:
        self._head_bytes += len(status) + 16

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:  # an interim reply (103 Early Hints): the real one follows
            self._interim = True
            self.headers = CaseInsensitiveDict()
            return
        self._head_done = True
        self.status_code = status
        coding = self.headers.get("Content-Encoding", "identity").strip().lower()
        if coding in ("gzip", "x-gzip", "deflate"):
            self._decoder = zlib.decompressobj(ZLIB_AUTO if coding != "deflate" else zlib.MAX_WBITS)
        elif coding not in ("", "identity"):  # raised by `_receive`: httptools would wrap it
            self._refusal = UnsupportedCoding(f"the reply is in an unsupported content coding ({coding})")

    def on_body(self, body: bytes) -> None:
        if not self._complete:
            self._pieces.append(body)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
        elif not self._complete:
            self._complete = True
            self._keep_alive = self._parser.should_keep_alive()  # only known now: the parser resets

    # reading
    def read_head(self) -> None:
        while not self._head_done:
            self._receive()

    def read(self) -> bytes:
        """What has arrived of the body (waiting for at least one byte); ``b""`` at its end."""
        while not self._pieces and not self._complete:
            self._receive()
        data = b"".join(self._pieces)
        self._pieces.clear()
        if self._decoder is not None:
            data = self._decoder.decompress(data)
            if self._complete:
                data += self._decoder.flush()
                self._decoder = None
        if self._complete and not data:
            self.close()
        return data

    def _receive(self) -> None:
        if self._sock is None:
            raise BrokenReply("the reply was closed")
        if not self._head_done and self.received > MAX_HEAD_BYTES:  # one header that never ends
            raise BrokenReply(f"the reply's head is larger than {MAX_HEAD_BYTES} bytes")
        data = self._sock.recv(READ_SIZE)
        if not data:
            if self._head_done and self._ends_at_close():
                self._complete = True  # and, the connection having ended, never reused
                return
            raise BrokenReply("the server closed the connection before the end of the reply")
        self.received += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            if self._complete:  # junk after the reply: it stands, the connection is not reused
                self._keep_alive = False
                return
            raise BrokenReply(f"the reply is not valid HTTP ({error})") from None
        if self._head_bytes > MAX_HEAD_BYTES:
            raise BrokenReply(f"the reply's head is larger than {MAX_HEAD_BYTES} bytes")
        if self._refusal is not None:
            raise self._refusal

    def _ends_at_close(self) -> bool:
        """A body with neither a length nor chunks ends when the server closes (HTTP/1.0 style)."""
        return "Content-Length" not in self.headers and "chunked" not in self.headers.get("Transfer-Encoding", "")

    def close(self) -> None:
        """Back to the pool when the reply ended exactly at its end, else closed."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._complete and self._keep_alive:
            self._holder.forget(sock)  # from now on an abort of this call must not touch it
            self._give_back(sock)
        else:
            sock.close()
