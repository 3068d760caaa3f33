"""uvicorn's HTTP protocol with a deadline for receiving each request (slow-loris defence).

uvicorn bounds the idle time between requests (keep-alive) but not the time a client may
take to send one: a client trickling a byte now and then holds its connection forever.
Here every request must arrive whole (head and body) within `request_timeout_s` of its
first byte (of the connection, for the first one); otherwise the connection is closed. The
deadline is disarmed once the request is complete, so a long response (an event stream)
is never cut. A held connection costs a transport and a parser, no thread.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class DeadlineHttpToolsProtocol(HttpToolsProtocol):
    request_timeout_s = 10.0  # replaced per server by `with_request_timeout`

    _deadline: asyncio.TimerHandle | None = None
    _receiving = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if not self._receiving and self._deadline is None:
            self._arm()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)

    def on_message_begin(self) -> None:
        self._receiving = True
        super().on_message_begin()

    def on_message_complete(self) -> None:
        self._receiving = False
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

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def with_request_timeout(seconds: float) -> type[DeadlineHttpToolsProtocol]:
    """A protocol class for one server's settings (uvicorn takes a class, not an instance)."""
    return type("RequestDeadlineProtocol", (DeadlineHttpToolsProtocol,), {"request_timeout_s": seconds})
