"""uvicorn's HTTP protocol with a deadline for receiving each request (slow-loris defence)
and a cap on the size of a request's head.

uvicorn bounds the idle time between requests (keep-alive) but not the time a client may
take to send one: a client trickling a byte now and then holds its connection forever.
Here every request must arrive whole (head and body) within `request_timeout_s` of its
first byte (of the connection, for the first one); otherwise the connection is closed. The
deadline is disarmed once the request is complete, so a long response (an event stream)
is never cut. A held connection costs a transport and a parser, no thread.

The head (request line and headers) is capped too: httptools keeps a header it has not
seen the end of, and every complete header, in memory until the head ends, so without a cap
one connection that sends headers for the ten seconds of its deadline makes the server hold
hundreds of megabytes (measured: +405 MB from 160 MB of small headers in 8 s, no login
needed). Past `MAX_HEAD_BYTES` or `MAX_HEADERS` the client gets 431 and the connection is
closed, as nginx and Node do (their defaults: 32 KiB and 16 KiB of head).
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024  # request line and headers; a browser sends a few KB
MAX_HEADERS = 128


class DeadlineHttpToolsProtocol(HttpToolsProtocol):
    request_timeout_s = 10.0  # replaced per server by `with_request_timeout`

    _deadline: asyncio.TimerHandle | None = None
    _receiving = False
    _in_head = True  # the bytes arriving belong to a request's head
    _head_bytes = 0
    _header_count = 0
    _heads_ended = 0  # heads completed while parsing the current chunk
    _field_bytes = 0
    _refused = False  # a 431 was sent: nothing more on this connection is parsed or served

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn declares BaseTransport; TCP gives a Transport
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._receiving and self._deadline is None:
            self._arm()  # the first byte of the next request on a kept-alive connection
        was_in_head, self._heads_ended = self._in_head, 0
        super().data_received(data)
        # Two counts, each never more than the true size of the head (so a body never counts):
        # the fields the parser has handed over (`_field_bytes`, which sees a head that ends
        # within this chunk), and the chunks that were head from their first byte to their last
        # (`_head_bytes`, which sees a header that never ends). An endless head is cut within
        # one read (256 KiB) past the cap.
        if was_in_head and self._in_head and not self._heads_ended and not self._refused:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse_head(f"the request head is larger than {MAX_HEAD_BYTES} bytes")

    def on_message_begin(self) -> None:
        self._receiving = True
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count_field(len(url))
        if not self._refused:
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > MAX_HEADERS:
            self._refuse_head(f"more than {MAX_HEADERS} header fields")
        self._count_field(len(name) + len(value) + 4)  # ": " and CRLF
        if not self._refused:
            super().on_header(name, value)

    def _count_field(self, size: int) -> None:
        self._field_bytes += size
        if self._field_bytes > MAX_HEAD_BYTES:
            self._refuse_head(f"the request head is larger than {MAX_HEAD_BYTES} bytes")

    # The parser finishes the chunk it was fed after a refusal: its callbacks do nothing then.
    def on_headers_complete(self) -> None:
        self._in_head, self._head_bytes, self._field_bytes, self._header_count = False, 0, 0, 0
        self._heads_ended += 1
        if not self._refused:
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._receiving = False
        self._in_head = True  # what comes next on this connection is the next request's head
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _refuse_head(self, reason: str) -> None:
        """431 and close; whatever else arrives on this connection is not parsed."""
        if self._refused:
            return
        self._refused = True
        self._disarm()
        message = json.dumps({"error": {"code": "headers_too_large", "message": reason}}).encode("ascii")
        self.transport.write(
            b"".join(
                [
                    STATUS_LINE[431],
                    b"content-type: application/json\r\nx-content-type-options: nosniff\r\n",
                    b"content-length: ",
                    str(len(message)).encode("ascii"),
                    b"\r\n",
                    b"connection: close\r\n\r\n",
                    message,
                ]
            )
        )
        self.transport.close()

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def with_request_timeout(seconds: float) -> type[DeadlineHttpToolsProtocol]:
    """A protocol class for one server's settings (uvicorn takes a class, not an instance)."""
    return type("RequestDeadlineProtocol", (DeadlineHttpToolsProtocol,), {"request_timeout_s": seconds})
